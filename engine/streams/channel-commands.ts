// What a client of the channel asks of its session, whatever carries the request (a `PUT` or
// `DELETE` beside an SSE stream, a frame on a WebSocket): the command sent and the answer given.
import type { ChannelHub } from './hub.js'
import type { SessionTarget, SessionTransport } from '../transport.js'

/** A user message; answered once it is recorded (the `201` body of `PUT eventstream/{sessionId}/{consumerId}`). */
export async function sendUserMessage(hub: ChannelHub, transport: SessionTransport, target: SessionTarget, consumerId: string, text: string) {
  hub.admitMessage()
  await transport.command(target, { type: 'user.message', consumerId, text })
  return { sessionId: target.sessionId, consumerId, status: 'accepted' as const }
}

/** Ends the session; answered once its close is written (the `201` body of `DELETE eventstream/{sessionId}`). */
export async function endSession(transport: SessionTransport, target: SessionTarget, reason: string) {
  await transport.command(target, { type: 'session.destroy', reason, by: 'channel' })
  return { sessionId: target.sessionId, status: 'destroyed' as const, reason }
}

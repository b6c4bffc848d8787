// ConversationRelay: a telephony platform (Twilio, or Telnyx with the same frames) opens one
// socket per call and speaks its own protocol; this module turns it into a consumer of a channel
// session. The platform's `setup` opens a session on the token's crew with the call's details as
// its arguments; `prompt` (the final transcript of an utterance) is a user message, `interrupt`
// the channel's barge-in, `dtmf` a user message marked as a key press. The session's reply goes
// back as `text` tokens (its `assistant.response` deltas, then `last: true` on its
// `assistant.message`); a transfer or the session's close goes back as `end`, whose
// `handoffData` names the session so the SIP side can fetch its snapshot, and the socket closes.
//
// The socket itself is the channel socket's: the gateway's limits and pings, SocketStream's
// queue and close codes (CHANNEL_CLOSE); only the frames differ. The platform reads no answers
// to its frames, so nothing is acked; a frame it gets wrong closes the socket with a code and a
// reason that say why, and a frame type we do not know is logged and ignored (the platform adds
// types over time).
import type { FromSchema } from 'json-schema-to-ts'
import { parseJsonBody } from '../../gateway/request.js'
import { httpError, type Principal, type SocketHandler, type SocketLink } from '../../platform/http.js'
import type { Logger } from '../../platform/logger.js'
import { conversationRelaySchemas, RELAY_FRAME_TYPES, schemas, type RelayFrameType } from '../../schemas/index.js'
import type { SessionTarget, SessionTransport } from '../transport.js'
import { endSession, sendUserMessage } from './channel-commands.js'
import type { ChannelHub, StreamOpener } from './hub.js'
import { CHANNEL_CLOSE, SocketStream } from './socket-stream.js'

type RelayFrameOf<T extends RelayFrameType> = FromSchema<(typeof conversationRelaySchemas)[`relay.${T}`]>
type RelayFrame = { [T in RelayFrameType]: RelayFrameOf<T> }[RelayFrameType]
/** The frames of a call in progress (setup opens it, error is only logged). */
type CallFrame = Exclude<RelayFrame, { type: 'setup' | 'error' }>

export interface ConversationRelayDeps {
  hub: ChannelHub
  transport: SessionTransport
  logger: Logger
  maxJsonDepth: number
}

/** How a key press reaches the assistant: a user message with this prefix, then the digit. */
export const DTMF_PREFIX = '[DTMF] '

/** Frames held while a call's session opens (a few milliseconds: a platform sends a prompt or two). */
const MAX_EARLY_FRAMES = 32

/** Why a session ends when its call does (report status `completed`). */
export const CALL_ENDED = 'call_ended'

/** `waiting` for setup; `opening` the session (frames wait for it); `ready`; `closed`. */
type Phase = 'waiting' | 'opening' | 'ready' | 'closed'

export class ConversationRelay implements SocketHandler {
  private phase: Phase = 'waiting'
  private stream!: SocketStream
  private target: SessionTarget | null = null
  private consumerId = ''
  /** Frames that came while the session was opening: the platform does not wait for it. */
  private early: CallFrame[] = []
  /** The last partial transcript of the utterance going on (`prompt` with `last: false`). */
  private partial = ''
  /** The reply being spoken: its message id and the text sent of it. */
  private speaking: { messageId: string; sent: string } | null = null
  /** The reply the caller talked over: none of it is sent any more. */
  private cut: string | null = null
  /** `end` was sent: the session is the SIP side's now. */
  private handedOff = false
  /** The platform closed the socket (the call ended) rather than us. */
  private hungUp = false

  constructor(
    private readonly deps: ConversationRelayDeps,
    private readonly principal: Principal,
    /** The crew of the token: every call on it opens a session there. */
    private readonly crewId: string,
  ) {}

  opened(link: SocketLink) {
    this.stream = new SocketStream(link, (_id, body) => this.encode(body))
  }

  closed() {
    const wasReady = this.phase === 'ready'
    this.phase = 'closed'
    this.hungUp = !this.handedOff && this.stream?.closedByClient === true
    this.stream?.closedBySocket()
    if (wasReady) this.hangUp()
  }

  /**
   * The platform closed the socket: the call is over (a platform does not resume a relay), so is
   * its session, unless it was handed off (the human's side uses it) or we closed the socket.
   */
  private hangUp() {
    if (!this.hungUp || !this.target) return
    const target = this.target
    endSession(this.deps.transport, target, CALL_ENDED).catch(error => {
      if (httpError(error)?.status !== 404) this.deps.logger.warn('conversation relay: ending the session of a finished call failed', { sessionId: target.sessionId, error })
    })
  }

  message(text: string) {
    if (this.phase === 'closed') return
    const frame = this.read(text)
    if (!frame) return
    if (frame.type === 'setup') {
      if (this.phase !== 'waiting') return this.refuse(CHANNEL_CLOSE.error(409), 'ALREADY_SET_UP', 'a second setup frame: one socket carries one call')
      return this.setup(frame)
    }
    if (frame.type === 'error') return void this.deps.logger.warn('conversation relay: the platform reports an error', { sessionId: this.target?.sessionId, description: frame.description?.slice(0, 1000) })
    if (this.phase === 'waiting') return this.refuse(CHANNEL_CLOSE.error(409), 'NOT_READY', `a ${frame.type} frame before setup`)
    if (this.phase === 'opening') {
      if (this.early.length >= MAX_EARLY_FRAMES) return this.refuse(CHANNEL_CLOSE.error(429), 'TOO_MANY_FRAMES', `more than ${MAX_EARLY_FRAMES} frames while the session opens`)
      return void this.early.push(frame)
    }
    this.act(frame)
  }

  /** A frame to act on; undefined when it closed the socket or is of a type we ignore. */
  private read(text: string): RelayFrame | undefined {
    let data: unknown
    try {
      data = parseJsonBody(Buffer.from(text, 'utf8'), this.deps.maxJsonDepth)
    } catch (error) {
      const known = httpError(error)
      return this.refuse(CHANNEL_CLOSE.error(400), known ? String(known.body().code) : 'INVALID_JSON', 'a frame must be a JSON object')
    }
    const type = data && typeof data === 'object' && !Array.isArray(data) ? (data as { type?: unknown }).type : undefined
    if (typeof type !== 'string') return this.refuse(CHANNEL_CLOSE.error(400), 'INVALID_FRAME', 'a frame is a JSON object with a string `type`')
    if (!(RELAY_FRAME_TYPES as readonly string[]).includes(type)) {
      this.deps.logger.info('conversation relay: frame type ignored', { sessionId: this.target?.sessionId, type: type.slice(0, 64) })
      return undefined
    }
    const details = schemas.validate(`relay.${type}`, data)
    if (details.length) return this.refuse(CHANNEL_CLOSE.error(400), 'VALIDATION_FAILED', `${type}: ${details.map(d => `${d.field || type} ${d.reason}`).join('; ')}`)
    return data as RelayFrame
  }

  private setup(frame: RelayFrameOf<'setup'>) {
    this.phase = 'opening'
    const call = Object.fromEntries(
      (['from', 'to', 'callSid', 'sessionId', 'parentCallSid', 'accountSid', 'forwardedFrom', 'callerName', 'direction', 'callType'] as const).filter(k => frame[k]).map(k => [k, frame[k]]),
    )
    const request = { accountId: this.principal.accountId, crewId: this.crewId, arguments: { ...(frame.customParameters ?? {}), call } }
    this.deps.hub.create(request, this.opener()).catch(error => this.fail(error))
  }

  private opener(): StreamOpener {
    return ({ sessionId, consumerId }, hooks) => {
      this.target = { sessionId, accountId: this.principal.accountId }
      this.consumerId = consumerId
      this.deps.logger.info('conversation relay: session opened', { sessionId, crewId: this.crewId })
      const stream = this.stream.bind(hooks)
      if (this.phase === 'opening') {
        this.phase = 'ready'
        for (const frame of this.early.splice(0)) this.act(frame)
      } else queueMicrotask(() => this.hangUp()) // the call ended while its session opened
      return stream
    }
  }

  /** A frame of a call whose session is open. */
  private act(frame: CallFrame) {
    switch (frame.type) {
      case 'prompt': {
        if (frame.last === false) {
          this.partial = frame.voicePrompt
          return
        }
        const text = frame.voicePrompt.trim() ? frame.voicePrompt : this.partial
        this.partial = ''
        if (text.trim()) this.command('prompt', () => sendUserMessage(this.deps.hub, this.deps.transport, this.target!, this.consumerId, text))
        return
      }
      case 'dtmf':
        return this.command('dtmf', () => sendUserMessage(this.deps.hub, this.deps.transport, this.target!, this.consumerId, `${DTMF_PREFIX}${frame.digit}`))
      case 'interrupt': {
        // Nothing more of the reply goes out from now on, whatever the session already published.
        if (this.speaking) this.cut = this.speaking.messageId
        this.speaking = null
        const heard = frame.utteranceUntilInterrupt
        return this.command('interrupt', () => this.deps.transport.command(this.target!, { type: 'user.interrupt', consumerId: this.consumerId, ...(heard !== undefined ? { heard } : {}) }))
      }
    }
  }

  /** Runs a frame's command; a refusal is logged (the platform reads no answers), a session gone ends the call. */
  private command(type: string, run: () => Promise<unknown>) {
    run().catch(error => {
      const known = httpError(error)
      if (known?.status === 404) return this.end({ reason: 'session_not_found' }, 'session closed: not found')
      const fields = { sessionId: this.target?.sessionId, type, error: known ? known.body() : error }
      if (known) this.deps.logger.warn('conversation relay: frame refused', fields)
      else this.deps.logger.error('conversation relay: frame failed', fields)
    })
  }

  /** What the platform gets of a channel event (its SSE lines); null: nothing. */
  private encode(body: string): string | null {
    const dataAt = body.indexOf('\ndata: ')
    const name = body.slice('event: '.length, dataAt)
    if (!RELAYED_EVENTS.has(name)) return null
    const data = JSON.parse(body.slice(dataAt + '\ndata: '.length)) as Record<string, unknown>
    const messageId = String(data.messageId ?? '')
    switch (name) {
      case 'assistant.response': {
        if (messageId === this.cut) return null
        if (this.speaking?.messageId !== messageId) this.speaking = { messageId, sent: '' }
        const delta = String(data.delta ?? '')
        this.speaking.sent += delta
        return text(delta, false)
      }
      case 'assistant.message': {
        if (messageId === this.cut) return null
        const whole = String(data.text ?? '')
        const sent = this.speaking?.messageId === messageId ? this.speaking.sent : ''
        this.speaking = null
        // A reply not streamed (impersonated, a static outbound message) is one token.
        return text(whole.startsWith(sent) ? whole.slice(sent.length) : '', true)
      }
      case 'assistant.interrupted':
        this.cut = messageId
        this.speaking = null
        return null
      case 'session.transferred': {
        // The call goes to a human: the platform ends the relay and hands the session id on.
        const reason = `transferred to ${String(data.agentId)}`
        this.handedOff = true
        queueMicrotask(() => this.stream.close(CHANNEL_CLOSE.sessionClosed, `session handed off: ${reason}`))
        return JSON.stringify(endFrame({ sessionId: this.target?.sessionId, reason: 'transferred', from: data.from, agentId: data.agentId }))
      }
      case 'session.closed':
        this.handedOff = true
        return JSON.stringify(endFrame({ sessionId: this.target?.sessionId, reason: data.reason }))
    }
    return null
  }

  /** Ends the call from our side: `end`, then the close. */
  private end(handoff: Record<string, unknown>, reason: string) {
    if (this.phase === 'closed' || this.stream.closed) return
    this.phase = 'closed'
    this.handedOff = true
    this.stream.reply(endFrame({ sessionId: this.target?.sessionId, ...handoff }))
    this.stream.close(CHANNEL_CLOSE.sessionClosed, reason)
  }

  /** The session could not be opened: a domain error as its HTTP status says, anything else as ours. */
  private fail(error: unknown) {
    const known = httpError(error)
    if (!known) this.deps.logger.error('conversation relay failed', { sessionId: this.target?.sessionId, error })
    const body = known ? known.body() : { code: 'INTERNAL', message: 'Unexpected server error' }
    const retry = known?.headers['Retry-After']
    this.refuse(CHANNEL_CLOSE.error(known?.status ?? 500), `${String(body.code)}${retry ? ` (retry after ${retry} s)` : ''}`, String(body.message))
  }

  private refuse(code: number, what: string, message: string): undefined {
    if (this.phase === 'closed' || !this.stream || this.stream.closed) return undefined
    this.phase = 'closed'
    this.deps.logger.warn('conversation relay closed', { sessionId: this.target?.sessionId, code, reason: what, message })
    this.stream.close(code, `${what}: ${message}`)
    return undefined
  }
}

/** The channel events a call hears of. */
const RELAYED_EVENTS = new Set(['assistant.response', 'assistant.message', 'assistant.interrupted', 'session.transferred', 'session.closed'])

const text = (token: string, last: boolean) => JSON.stringify({ type: 'text', token, last })
const endFrame = (handoff: Record<string, unknown>) => ({ type: 'end', handoffData: JSON.stringify(handoff) })

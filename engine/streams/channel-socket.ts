// The assistant channel over one WebSocket: one socket, one consumer of one session. The socket
// first opens a session on a crew (`open`) or attaches to one (`attach`, or the URL's
// `sessionId`); from then on it carries the session's events (the hub's, with the same ids and
// payloads as SSE) and takes the user's frames (`message`, `interrupt`, `end`), each answered
// by an `ack` carrying what the HTTP call's success body carries, or an `error` carrying its
// error body. A frame the protocol cannot take (not JSON, an unknown type, invalid against its
// schema, out of order) closes the socket with a code that says why: nothing is dropped silently.
import type { FromSchema } from 'json-schema-to-ts'
import { parseJsonBody } from '../../gateway/request.js'
import { httpError, type Principal, type SocketHandler, type SocketLink, type SocketScope } from '../../platform/http.js'
import type { Logger } from '../../platform/logger.js'
import { channelSocketSchemas, FRAME_TYPES, schemas, type FrameType } from '../../schemas/index.js'
import type { SessionTarget, SessionTransport } from '../transport.js'
import { endSession, sendUserMessage } from './channel-commands.js'
import type { ChannelHub, StreamOpener } from './hub.js'
import { CHANNEL_CLOSE, SocketStream } from './socket-stream.js'

type FrameOf<T extends FrameType> = FromSchema<(typeof channelSocketSchemas)[`socket.${T}`]>
type AnyFrame = { [T in FrameType]: FrameOf<T> }[FrameType]
type FrameId = string | number | undefined

export interface ChannelSocketDeps {
  hub: ChannelHub
  transport: SessionTransport
  logger: Logger
  /** MAX_JSON_DEPTH, as for request bodies. */
  maxJsonDepth: number
}

/** An attach the URL asked for (`?sessionId=&consumerId=&lastEventId=`), made as the socket opens. */
export interface AttachRequest {
  sessionId: string
  consumerId?: string
  lastEventId?: number
}

/**
 * `waiting`: for `open` or `attach`; `opening`: the session or the attach is on its way (a user
 * frame now is out of order); `ready`: a consumer of its session; `closed`.
 */
type Phase = 'waiting' | 'opening' | 'ready' | 'closed'

export class ChannelSocket implements SocketHandler {
  private phase: Phase = 'waiting'
  private stream!: SocketStream
  private target: SessionTarget | null = null
  private consumerId = ''

  constructor(
    private readonly deps: ChannelSocketDeps,
    private readonly principal: Principal,
    /** A ticket's: the crew or the session this socket may open or attach to. */
    private readonly scope: SocketScope | undefined,
    private readonly attachAtOpen: AttachRequest | undefined,
  ) {}

  opened(link: SocketLink) {
    this.stream = new SocketStream(link)
    if (this.attachAtOpen) this.attach(this.attachAtOpen, undefined)
  }

  closed() {
    this.phase = 'closed'
    this.stream?.closedBySocket()
  }

  message(text: string) {
    const frame = this.read(text)
    if (!frame || this.phase === 'closed') return
    switch (frame.type) {
      case 'open':
      case 'attach':
        if (this.phase !== 'waiting') return this.refuse(409, 'ALREADY_OPEN', 'This socket already opened or attached to a session; one socket carries one session', frame)
        return frame.type === 'open' ? this.open(frame) : this.attach(frame, frame.id)
      default:
        if (this.phase !== 'ready') return this.refuse(409, 'NOT_READY', `A ${frame.type} frame before the session is ready: send open or attach and wait for its ack`, frame)
        return void this.run(frame)
    }
  }

  /** The frame, valid against its schema; undefined when the socket was closed for it. */
  private read(text: string): AnyFrame | undefined {
    let data: unknown
    try {
      data = parseJsonBody(Buffer.from(text, 'utf8'), this.deps.maxJsonDepth)
    } catch (error) {
      return this.fail(error)
    }
    const type = data && typeof data === 'object' && !Array.isArray(data) ? (data as { type?: unknown }).type : undefined
    if (typeof type !== 'string' || !(FRAME_TYPES as readonly string[]).includes(type)) {
      return this.refuse(400, 'UNKNOWN_FRAME_TYPE', `A frame is a JSON object whose type is one of ${FRAME_TYPES.join(', ')}`, undefined, { types: FRAME_TYPES })
    }
    const details = schemas.validate(`socket.${type}`, data)
    if (details.length) {
      const id = (data as { id?: unknown }).id
      return this.refuse(400, 'VALIDATION_FAILED', `The ${type} frame is not valid`, { type: type as FrameType, id: typeof id === 'string' || typeof id === 'number' ? id : undefined }, { details })
    }
    return data as AnyFrame
  }

  private open(frame: FrameOf<'open'>) {
    if (this.scope && this.scope.crewId !== frame.crewId) return this.refuse(403, 'TICKET_SCOPE', "This socket's ticket is not for a session on this crew", frame)
    this.phase = 'opening'
    const request = { accountId: this.principal.accountId, crewId: frame.crewId, arguments: frame.arguments ?? {}, outbound: frame.outbound }
    this.deps.hub.create(request, this.opener(frame.id, 'open')).catch(error => this.fail(error, { type: 'open', id: frame.id }))
  }

  private attach(request: AttachRequest, id: FrameId) {
    if (this.scope && this.scope.sessionId !== request.sessionId) return this.refuse(403, 'TICKET_SCOPE', "This socket's ticket is not for this session", { type: 'attach', id })
    this.phase = 'opening'
    const target = { sessionId: request.sessionId.toLowerCase(), accountId: this.principal.accountId }
    const resume = { consumerId: request.consumerId?.toLowerCase(), lastEventId: request.lastEventId }
    this.deps.hub.listen(target, resume, this.opener(id, 'attach')).catch(error => this.fail(error, { type: 'attach', id }))
  }

  /** The hub opens this socket's stream once the session's ids are known: acked first, then its events. */
  private opener(id: FrameId, of: 'open' | 'attach'): StreamOpener {
    return ({ sessionId, consumerId }, hooks) => {
      this.target = { sessionId, accountId: this.principal.accountId }
      this.consumerId = consumerId
      if (this.phase === 'opening') this.phase = 'ready'
      this.stream.reply({ type: 'ack', ...(id !== undefined ? { id } : {}), of, result: { sessionId, consumerId } })
      return this.stream.bind(hooks)
    }
  }

  /** A user frame of a ready socket: answered by an ack, or an error frame (the socket stays open). */
  private async run(frame: Exclude<AnyFrame, { type: 'open' | 'attach' }>) {
    const { hub, transport } = this.deps
    const target = this.target!
    try {
      let result: unknown
      if (frame.type === 'message') result = await sendUserMessage(hub, transport, target, this.consumerId, frame.message)
      else if (frame.type === 'interrupt') result = await transport.command(target, { type: 'user.interrupt', consumerId: this.consumerId, ...(frame.heard !== undefined ? { heard: frame.heard } : {}) })
      else result = await endSession(transport, target, frame.reason ?? 'finished')
      this.stream.reply({ type: 'ack', ...(frame.id !== undefined ? { id: frame.id } : {}), of: frame.type, result })
    } catch (error) {
      const known = httpError(error)
      if (!known) this.deps.logger.error('channel socket frame failed', { sessionId: target.sessionId, type: frame.type, error })
      this.stream.reply(errorFrame(known?.status ?? 500, known ? known.body() : { code: 'INTERNAL', message: 'Unexpected server error' }, frame))
    }
  }

  /** Refuses a frame, or the socket's opening: an error frame, then the close (4000 + status). */
  private refuse(status: number, code: string, message: string, frame?: { type: FrameType; id?: FrameId }, extra: Record<string, unknown> = {}): undefined {
    return this.close(status, { code, message, ...extra }, frame)
  }

  /** A throw that ends the socket: a domain error as its HTTP status would say, anything else as ours. */
  private fail(error: unknown, frame?: { type: FrameType; id?: FrameId }): undefined {
    const known = httpError(error)
    if (!known) this.deps.logger.error('channel socket failed', { sessionId: this.target?.sessionId, error })
    const body = known ? known.body() : { code: 'INTERNAL', message: 'Unexpected server error' }
    const retry = known?.headers['Retry-After']
    return this.close(known?.status ?? 500, retry ? { ...body, retryAfterSeconds: Number(retry) } : body, frame)
  }

  private close(status: number, body: Record<string, unknown> & { code: string; message: string }, frame?: { type: FrameType; id?: FrameId }): undefined {
    if (this.phase === 'closed' || !this.stream || this.stream.closed) return undefined
    this.phase = 'closed'
    this.stream.reply(errorFrame(status, body, frame))
    // The reason is cut to 123 bytes: the code and the retry hint first, the message after.
    const retry = typeof body.retryAfterSeconds === 'number' ? ` (retry after ${body.retryAfterSeconds} s)` : ''
    this.stream.close(CHANNEL_CLOSE.error(status), `${body.code}${retry}: ${body.message}`)
    return undefined
  }
}

function errorFrame(status: number, error: Record<string, unknown>, frame?: { type?: FrameType; id?: FrameId }) {
  return { type: 'error', ...(frame?.id !== undefined ? { id: frame.id } : {}), ...(frame?.type ? { of: frame.type } : {}), status, error }
}

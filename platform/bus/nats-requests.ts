// Requests over NATS on the hot path (a gateway's command to its session's node, a node's append to
// the session journal), answered on one wildcard inbox per connection. nats.js's `request()`
// gives each request its own timer, deferred and request object, and on completion builds a
// `RequestError` with a stack trace even after it resolved (its `cancel()` always does): a few
// per cent of a gateway's and an engine node's CPU per message in bench/cluster. Here a request
// is an entry in a map, and one sweep per `SWEEP_MS` times out the late ones.
//
// The errors are nats.js's own (TimeoutError, NoRespondersError, JetStreamApiError), so callers
// tell them apart as before.
import { JetStreamApiError, type JetStreamApiError as ApiError } from '@nats-io/jetstream'
import { createInbox, headers as natsHeaders, NoRespondersError, TimeoutError, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node'

/** How often late requests are looked for: a timeout fires up to this much after its time. */
const SWEEP_MS = 50

interface Pending {
  subject: string
  deadline: number
  resolve(msg: Msg): void
  reject(error: Error): void
}

/** A JetStream publish acknowledgement. */
export interface PublishAck {
  stream: string
  seq: number
  duplicate: boolean
}

export interface JetStreamPublishOptions {
  /** Nats-Msg-Id: a retry within the stream's duplicate window is stored once. */
  msgID?: string
  /** Nats-Expected-Last-Subject-Sequence: refused (wrong last sequence) when another write came between. */
  lastSubjectSequence?: number
  timeoutMs: number
}

const inboxes = new WeakMap<NatsConnection, NatsRequests>()

export class NatsRequests {
  private readonly pending = new Map<string, Pending>()
  private readonly prefix: string
  private next = 0
  private sweeper: NodeJS.Timeout | null = null

  /** The connection's one instance (one inbox subscription per connection). */
  static of(nc: NatsConnection): NatsRequests {
    let requests = inboxes.get(nc)
    if (!requests) inboxes.set(nc, (requests = new NatsRequests(nc)))
    return requests
  }

  private constructor(private readonly nc: NatsConnection) {
    this.prefix = `${createInbox()}.`
    nc.subscribe(`${this.prefix}*`, { callback: (error, msg) => (error ? this.failAll(error) : this.answer(msg)) })
    nc.closed().then(
      error => this.failAll(error ?? new Error('NATS connection closed')),
      () => {},
    )
  }

  /** Sends `data` to `subject` and answers its first reply; TimeoutError, or NoRespondersError when nobody listens. */
  request(subject: string, data: Uint8Array | string, timeoutMs: number, headers?: MsgHdrs): Promise<Msg> {
    return new Promise<Msg>((resolve, reject) => {
      const token = (this.next++).toString(36)
      this.pending.set(token, { subject, deadline: Date.now() + timeoutMs, resolve, reject })
      this.sweeper ??= setInterval(() => this.sweep(), SWEEP_MS).unref()
      try {
        this.nc.publish(subject, data, { reply: this.prefix + token, headers })
      } catch (error) {
        this.pending.delete(token)
        reject(error as Error)
      }
    })
  }

  /** A JetStream publish (what `js.publish` does, with the options the journal uses): the stream's acknowledgement, or its refusal as JetStreamApiError. */
  async publish(subject: string, data: Uint8Array | string, options: JetStreamPublishOptions): Promise<PublishAck> {
    let hdrs: MsgHdrs | undefined
    if (options.msgID !== undefined || options.lastSubjectSequence !== undefined) {
      hdrs = natsHeaders()
      if (options.msgID !== undefined) hdrs.set('Nats-Msg-Id', options.msgID)
      if (options.lastSubjectSequence !== undefined) hdrs.set('Nats-Expected-Last-Subject-Sequence', String(options.lastSubjectSequence))
    }
    const msg = await this.request(subject, data, options.timeoutMs, hdrs)
    const answer = msg.json<{ stream?: string; seq?: number; duplicate?: boolean; error?: ConstructorParameters<typeof ApiError>[0] }>()
    if (answer.error) throw new JetStreamApiError(answer.error)
    if (!answer.stream || typeof answer.seq !== 'number') throw new Error(`not a JetStream acknowledgement from ${subject}`)
    return { stream: answer.stream, seq: answer.seq, duplicate: answer.duplicate === true }
  }

  private answer(msg: Msg) {
    const token = msg.subject.slice(this.prefix.length)
    const pending = this.pending.get(token)
    if (!pending) return // answered after its timeout
    this.pending.delete(token)
    // A reply with no data and status 503 is the server saying nobody subscribes to the subject.
    if (msg.data.length === 0 && msg.headers?.code === 503) pending.reject(new NoRespondersError(pending.subject))
    else pending.resolve(msg)
  }

  private sweep() {
    const now = Date.now()
    for (const [token, pending] of this.pending) {
      if (pending.deadline > now) continue
      this.pending.delete(token)
      pending.reject(new TimeoutError())
    }
    if (this.pending.size === 0 && this.sweeper) {
      clearInterval(this.sweeper)
      this.sweeper = null
    }
  }

  private failAll(error: Error) {
    for (const pending of this.pending.values()) pending.reject(error)
    this.pending.clear()
  }
}

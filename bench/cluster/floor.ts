// The floor of a distributed turn: the lighter design's essential parts over NATS and nothing
// else, measured by run.ts beside the service to show what a turn must cost split over a gateway
// and an engine node. Two processes:
//
//   gateway  uWebSockets.js as the bare server of bench/sse uses it (same paths, key header, JSON
//            bodies, SSE frames); a session's stream is a NATS subscription to its event subject;
//            a message is a NATS request to the session's node, its `201` the node's answer
//   engine   per session one XState actor of the real machine (engine/session/machine.ts) whose
//            effects make the turn's history entries and events; the entries appended to a
//            JetStream journal (file storage, one publish per session per loop turn, fenced by
//            the expected last subject sequence, the answer after its acknowledgement), the
//            events published on a subject a JetStream stream keeps (as the event log does)
//
// Both use the service's NATS plumbing (writes gathered per loop turn, requests on one inbox). No
// wire validation, hub, replay ring, ownership, checkpoints, records, MongoDB, metrics or logs.
//
//   node --import @tapjs/typescript/import bench/cluster/floor.ts gateway|engine   (NATS_URL; IPC: {port})
import { randomUUID } from 'node:crypto'
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node'
import { jetstreamManager, StorageType, DiscardPolicy } from '@nats-io/jetstream'
import { persistedControl } from '../../engine/session/machine.js'
import { loadNativeUws, type HttpResponse } from '../../gateway/uws.js'
import { NatsRequests } from '../../platform/bus/nats-requests.js'
import { coalesceNatsWrites } from '../../platform/bus/nats-writes.js'
import { floorMachine, type FloorSession } from '../floor-machine.js'

const KEY = process.env.FLOOR_API_KEY ?? ''
const CHANNEL = '/assistants-channel/api/v1/channel/api/eventstream'
const TIMEOUT_MS = 15_000
const events = (sessionId: string) => `floor.s.${sessionId}.ev`
const commands = (sessionId: string) => `floor.s.${sessionId}.cmd`
const journal = (sessionId: string) => `floor.j.${sessionId}`

async function natsConnection(): Promise<NatsConnection> {
  coalesceNatsWrites()
  return connect({ servers: process.env.NATS_URL, noAsyncTraces: true })
}

// ------------------------------------------------------------------ gateway

async function gateway(): Promise<number> {
  const nc = await natsConnection()
  const requests = NatsRequests.of(nc)
  const uws = loadNativeUws()
  const app = uws.App()
  const refuse = (res: HttpResponse, status: string) => res.cork(() => void res.writeStatus(status).end(`{"code":"${status.slice(4).toUpperCase().replace(/ /g, '_')}"}`))
  const readJson = (res: HttpResponse, done: (body: any) => void) => {
    let buffer: Buffer | null = null
    res.onData((chunk, last) => {
      const part = Buffer.from(chunk)
      buffer = buffer ? Buffer.concat([buffer, part]) : part
      if (!last) return
      try {
        done(JSON.parse(buffer.toString('utf8')))
      } catch {
        done(undefined)
      }
    })
  }
  app.post(`${CHANNEL}/:crewId`, (res, req) => {
    if (req.getHeader('apikey') !== KEY) return void refuse(res, '401 Unauthorized')
    let open = true
    res.onAborted(() => (open = false))
    readJson(res, () => {
      if (!open) return
      const sessionId = randomUUID()
      // Subscribed before the node can publish the session's first event.
      const sub = nc.subscribe(events(sessionId), {
        callback: (_, msg) => {
          if (open) res.cork(() => void res.write(msg.data))
        },
      })
      res.onAborted(() => {
        open = false
        sub.unsubscribe()
      })
      res.cork(() => void res.writeStatus('200 OK').writeHeader('Content-Type', 'text/event-stream').writeHeader('Cache-Control', 'no-cache'))
      requests.request('floor.create', sessionId, TIMEOUT_MS).catch(() => open && res.cork(() => void res.end()))
    })
  })
  app.put(`${CHANNEL}/:sessionId/:consumerId`, (res, req) => {
    if (req.getHeader('apikey') !== KEY) return void refuse(res, '401 Unauthorized')
    const sessionId = req.getParameter(0)!
    const consumerId = req.getParameter(1)!
    let open = true
    res.onAborted(() => (open = false))
    readJson(res, body => {
      if (!open) return
      if (typeof body?.message !== 'string') return void refuse(res, '400 Bad Request')
      requests.request(commands(sessionId), JSON.stringify({ consumerId, text: body.message }), TIMEOUT_MS).then(
        answer => open && res.cork(() => void res.writeStatus('201 Created').writeHeader('Content-Type', 'application/json').end(answer.data)),
        () => open && refuse(res, '503 Service Unavailable'),
      )
    })
  })
  return new Promise((resolve, reject) => app.listen('127.0.0.1', 0, socket => (socket ? resolve(uws.us_socket_local_port(socket as any)) : reject(new Error('listen failed')))))
}

// ------------------------------------------------------------------ engine

interface Session extends FloorSession {
  eventSeq: number
  /** Entries not yet appended, and the answers waiting for theirs. */
  pending: unknown[]
  waiting: { seq: number; answer: () => void }[]
  /** The journal's last stream sequence for this session (what the next append expects), and whether one is in flight. */
  last: number
  appending: boolean
  frames: string
}

async function engine() {
  const nc = await natsConnection()
  const requests = NatsRequests.of(nc)
  const jsm = await jetstreamManager(nc)
  const stream = { storage: StorageType.File, discard: DiscardPolicy.Old }
  await jsm.streams.add({ name: 'FLOOR_EVENTS', subjects: [events('*')], max_msgs_per_subject: 100, ...stream })
  await jsm.streams.add({ name: 'FLOOR_JOURNAL', subjects: [journal('*')], ...stream })
  const sessions = new Map<string, Session>()

  // A session's frames of one loop turn go out as one event message; its entries as one append.
  const dirty = new Set<Session>()
  const flushSoon = (s: Session) => {
    if (dirty.size === 0) setImmediate(flush)
    dirty.add(s)
  }
  const flush = () => {
    for (const s of dirty) {
      if (s.frames) nc.publish(events(s.id), s.frames)
      s.frames = ''
      append(s)
    }
    dirty.clear()
  }
  const append = (s: Session) => {
    if (s.appending || s.pending.length === 0) return
    const entries = s.pending
    s.pending = []
    const upTo = s.history
    s.appending = true
    const record = JSON.stringify({ entries, control: persistedControl(s.actor.getSnapshot()) })
    requests.publish(journal(s.id), record, { msgID: `${s.id}:${s.last}`, lastSubjectSequence: s.last, timeoutMs: 5_000 }).then(
      ack => {
        s.last = ack.seq
        s.appending = false
        const waiting = s.waiting
        s.waiting = []
        for (const w of waiting) (w.seq <= upTo ? w.answer() : s.waiting.push(w))
        append(s)
      },
      () => {
        s.appending = false
        s.pending = [...entries, ...s.pending]
        setTimeout(() => append(s), 100)
      },
    )
  }
  const frame = (s: Session, event: string, data: unknown) => {
    const text = `id: ${++s.eventSeq}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`
    if (process.env.FLOOR_UNBATCHED) return void nc.publish(events(s.id), text)
    s.frames += text
    flushSoon(s)
  }
  const log = (s: Session, type: string, at: number, fields: Record<string, unknown>) => {
    s.pending.push({ seq: ++s.history, at, type, ...fields })
    flushSoon(s)
  }

  const floor = floorMachine<Session>({ log, frame, reply: text => `Noted: ${text}` })

  nc.subscribe('floor.create', {
    queue: 'floor',
    callback: (_, msg: Msg) => {
      const id = msg.string()
      const consumerId = randomUUID()
      const s: Session = { id, actor: floor.actor(), eventSeq: 0, history: 0, pending: [], waiting: [], last: 0, appending: false, frames: '', user: { seq: 0, text: '' } }
      floor.bind(s)
      sessions.set(id, s)
      log(s, 'session.created', Date.now(), { crewId: 'demo', agentId: 'general', consumerId })
      frame(s, 'Initialized', { sessionId: id, consumerId })
      s.actor.start()
      s.waiting.push({ seq: s.history, answer: () => msg.respond('{}') })
    },
  })
  nc.subscribe(commands('*'), {
    callback: (_, msg: Msg) => {
      const s = sessions.get(msg.subject.split('.')[2]!)
      if (!s) return void msg.respond('{"code":"NOT_FOUND"}')
      const { consumerId, text } = msg.json<{ consumerId: string; text: string }>()
      s.actor.send({ type: 'user.message', text, consumerId, at: Date.now() })
      s.waiting.push({ seq: s.user.seq, answer: () => msg.respond(JSON.stringify({ sessionId: s.id, consumerId, status: 'accepted' })) })
    },
  })
  await nc.flush()
}

const role = process.argv[2]
if (role === 'gateway') gateway().then(port => process.send?.({ port }))
else if (role === 'engine') engine().then(() => process.send?.({ ready: true }))
else {
  console.error('usage: floor.ts gateway|engine')
  process.exit(1)
}

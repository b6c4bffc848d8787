// The supervisors' lifecycle feed of an account's sessions: created, changed (state,
// transfer, a turn's counts) and closed, read from the session records by their updated_at.
// Why polling the store: every engine node writes those records behind its sessions, so one
// indexed query per feed per tick sees the sessions of every node without subscribing a gateway
// to every session; the event id is the change's time, so a feed resumes with Last-Event-ID
// from any gateway. A write can land a little after the time it carries (write-behind, clocks
// of different nodes), so a second read trails the first by a short window (lagMs) and sends
// what the first missed; a resumed feed may repeat the changes of that window, which a client
// applies by sessionId. Both reads are cursors on (updated_at, _id) that only move forward, so a
// feed progresses whatever the rate of changes, and a tick reads at most `batch` rows for each.
import { eventBody, HeartbeatWheel, parseLastEventId, SseStream } from '../../gateway/sse.js'
import { OverloadGuard } from '../../platform/overload.js'
import { Invalid } from '../../platform/errors.js'
import type { StreamRoute } from '../../platform/http.js'
import type { Clock } from '../../platform/clock.js'
import type { ChangeCursor, SessionDirectory } from './session-directory.js'
import type { SessionRecordDoc } from '../../reports/index.js'
import type { Presence } from './session-watch.js'
import { userIdOf } from '../routes/common.js'
import { SESSIONS_PATH } from '../routes/supervision.js'

export interface FeedOptions {
  pollMs: number
  /** How long after its time a write may land: the second read trails the clock by this much. */
  lagMs: number
  heartbeatMs: number
  /** Changes each read takes per tick at most (the rest come next tick). */
  batch: number
}

export const FEED_DEFAULTS: FeedOptions = { pollMs: 250, lagMs: 2000, heartbeatMs: 15_000, batch: 1000 }

export function feedRoute(directory: SessionDirectory, clock: Clock, overload = OverloadGuard.off(), options: FeedOptions = FEED_DEFAULTS, presence?: Presence): StreamRoute {
  const heartbeats = new HeartbeatWheel(options.heartbeatMs, eventBody('hearthbeat', { minutes: options.heartbeatMs / 60_000 }))
  return {
    kind: 'stream',
    method: 'get',
    path: `${SESSIONS_PATH}/feed`,
    role: 'admin',
    tag: 'Session administration',
    summary:
      "Live feed of the account's sessions over SSE: session.created, session.changed (state, transfer, counts), session.closed, session.presence (who watches a session, as it changes on this gateway); resumable with Last-Event-ID (the Unix ms id of the last event)",
    requiredHeaders: ['UserId'],
    responses: {
      '200': { description: 'text/event-stream of supervision.feed.event', schema: 'supervision.feed.event' },
      '400': { description: 'USER_ID_REQUIRED, INVALID_USER_ID, INVALID_LAST_EVENT_ID' },
      '401': { description: 'Missing or unknown apikey' },
      '403': { description: 'The key lacks the admin role' },
      '429': { description: "ACCOUNT_STREAM_LIMIT: this node is short of supervision streams and the account holds its share or more (Retry-After)" },
      '503': { description: 'OVERLOADED: this node holds its maximum of supervision streams, or is overloaded (Retry-After)' },
    },
    async open(ctx, start) {
      userIdOf(ctx)
      const lastEventId = parseLastEventId(ctx.headers['last-event-id'] ?? ctx.query.get('lastEventId'))
      if (lastEventId === null) throw new Invalid('INVALID_LAST_EVENT_ID', 'Last-Event-ID must be a non-negative integer')
      const accountId = ctx.principal.accountId
      // Each open feed queries the store every tick: they are counted, per account and in all.
      const place = overload.admitStream('supervision', accountId)
      // A fresh feed starts now (the listing gives the current state); a resumed one after its id.
      let position = lastEventId ?? clock.now()
      // `live` reads every change after it and sends it at once. `settled` reads the same changes
      // again once they are lagMs old (never past `live`): those written after `live` had passed
      // their time are sent then. Both start a window back, as a resumed feed repeats it.
      let live: ChangeCursor = { at: position - options.lagMs, id: '' }
      let settled: ChangeCursor = { ...live }
      // The updated_at sent of each session, about oldest first (re-inserted when sent again);
      // forgotten once `settled` has passed it, as no read goes back there.
      const sent = new Map<string, number>()
      const sink = start({ 'cache-control': 'no-cache' })
      place.opened = true
      sink.onClose(() => place.release())
      const stream = new SseStream(sink, { heartbeats, currentId: () => position, onDropped: () => stream.end() })
      stream.send(position, eventBody('feed.ready', { since: position }))
      const emit = (r: SessionRecordDoc, now: number) => {
        const at = r.updated_at ?? 0
        if ((sent.get(r._id) ?? -1) >= at) return
        const known = sent.has(r._id)
        sent.delete(r._id) // inserted again, last: the map stays about in time order
        sent.set(r._id, at)
        const untouched = r.messages === 0 && r.transfers === 0 && r.status === 'active'
        const kind = r.end_time !== null ? 'closed' : untouched && !known ? 'created' : 'changed'
        if (at > position) position = at
        stream.send(position, eventBody(`session.${kind}`, { kind, session: directory.listed(r, now) }))
      }
      let timer: NodeJS.Timeout | undefined
      let reading = false
      const tick = async () => {
        if (reading || stream.closed) return
        reading = true
        try {
          const rows = await directory.changesAfter(accountId, live, undefined, options.batch)
          let now = clock.now()
          for (const r of rows) {
            live = { at: r.updated_at ?? 0, id: r._id }
            emit(r, now)
          }
          const until = Math.min(now - options.lagMs, live.at)
          if (until >= settled.at && !stream.closed) {
            const late = await directory.changesAfter(accountId, settled, until, options.batch)
            now = clock.now()
            // It moves over rows only, never to a time: a clock of its own ahead of the writers'
            // would otherwise carry it past changes still to come with an earlier time.
            for (const r of late) {
              settled = { at: r.updated_at ?? 0, id: r._id }
              emit(r, now)
            }
          }
          for (const [id, at] of sent) {
            if (at >= settled.at) break
            sent.delete(id)
          }
        } catch {
          // A store hiccup: the next tick reads on from where each cursor stands.
        } finally {
          reading = false
        }
      }
      timer = setInterval(() => void tick(), options.pollMs)
      timer.unref()
      sink.onClose(() => clearInterval(timer))
      // Presence is no record change: it comes from this gateway's watch streams as they open and
      // close, pushed at once (the listing's `watchers` is where a feed starts from).
      const unpresence = presence?.onChange(change => {
        if (change.accountId === accountId && !stream.closed) stream.send(position, eventBody('session.presence', { kind: 'presence', sessionId: change.sessionId, watchers: change.watchers }))
      })
      if (unpresence) sink.onClose(unpresence)
      void tick()
    },
  }
}

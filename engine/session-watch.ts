// A supervisor's watch stream of one session (issue 13): its whole timeline as it grows — the
// history entries (messages, whispers, tool calls and results, transfers, admin actions with
// their UserId), ids = history seq so Last-Event-ID resumes — plus the live channel events
// (event `channel`, no id: streamed chunks a history entry later sums up). It subscribes to the
// transport directly, so it is no channel consumer (no consumer slot, no delivery position).
// Presence: who watches which session, from the open watch streams of this process.
import { Invalid, NotFound } from '../platform/errors.js'
import { OverloadGuard } from '../platform/overload.js'
import { eventBody, HeartbeatWheel, parseLastEventId, SseStream } from '../gateway/sse.js'
import type { StreamRoute } from '../platform/http.js'
import type { SessionTransport } from './transport.js'
import { userIdOf, uuidParam } from './routes/common.js'
import { ADMIN_BASE } from './routes/admin.js'

export class Presence {
  private readonly watchers = new Map<string, Map<string, number>>()

  enter(sessionId: string, userId: string) {
    const users = this.watchers.get(sessionId) ?? new Map<string, number>()
    users.set(userId, (users.get(userId) ?? 0) + 1)
    this.watchers.set(sessionId, users)
  }

  leave(sessionId: string, userId: string) {
    const users = this.watchers.get(sessionId)
    if (!users) return
    const n = (users.get(userId) ?? 1) - 1
    if (n > 0) users.set(userId, n)
    else users.delete(userId)
    if (!users.size) this.watchers.delete(sessionId)
  }

  of(sessionId: string): string[] {
    return [...(this.watchers.get(sessionId)?.keys() ?? [])].sort()
  }
}

export function watchRoute(transport: SessionTransport, presence: Presence, overload = OverloadGuard.off(), options = { pollMs: 300, heartbeatMs: 15_000 }): StreamRoute {
  const heartbeats = new HeartbeatWheel(options.heartbeatMs, eventBody('hearthbeat', { minutes: options.heartbeatMs / 60_000 }))
  return {
    kind: 'stream',
    method: 'get',
    path: `${ADMIN_BASE}/:sessionId/watch`,
    role: 'admin',
    tag: 'Session administration',
    summary:
      "Supervisor watch stream (SSE): the session's history entries as they are written (first event watch.ready; then event history, id = seq; resumable with Last-Event-ID) and its live channel events (event channel); not a channel consumer. Watchers are listed as presence",
    requiredHeaders: ['UserId'],
    responses: {
      '200': { description: 'text/event-stream', schema: 'supervision.watch.stream' },
      '400': { description: 'USER_ID_REQUIRED, INVALID_USER_ID, INVALID_SESSION_ID, INVALID_LAST_EVENT_ID' },
      '401': { description: 'Missing or unknown apikey' },
      '403': { description: 'The key lacks the admin role' },
      '404': { description: "SESSION_NOT_FOUND (missing, destroyed, or another account's)" },
      '429': { description: "ACCOUNT_STREAM_LIMIT: the account holds its share of this node's supervision streams (Retry-After)" },
      '503': { description: 'OVERLOADED: this node holds its maximum of supervision streams, or is overloaded (Retry-After)' },
    },
    async open(ctx, start) {
      const userId = userIdOf(ctx)
      const target = { sessionId: uuidParam(ctx, 'sessionId', 'INVALID_SESSION_ID'), accountId: ctx.principal.accountId }
      const lastEventId = parseLastEventId(ctx.headers['last-event-id'] ?? ctx.query.get('lastEventId'))
      if (lastEventId === null) throw new Invalid('INVALID_LAST_EVENT_ID', 'Last-Event-ID must be a non-negative integer')
      let after = lastEventId ?? 0
      // Each open watch polls the session's history: they are counted, per account and in all,
      // from now on (watches racing for the last places must not all pass while they wait).
      const place = overload.admitStream('supervision', target.accountId)
      let first: { data: { seq: number }[] }
      let sink: ReturnType<typeof start>
      try {
        // The history answers 404 for a missing or foreign session before the stream starts.
        first = (await transport.command(target, { type: 'query.history', after, limit: 1000 })) as { data: { seq: number }[] }
        sink = start({ 'cache-control': 'no-cache' })
      } catch (error) {
        place.release()
        throw error
      }
      place.opened = true
      sink.onClose(() => place.release())
      const stream = new SseStream(sink, { heartbeats, currentId: () => after, onDropped: () => stream.end() })
      presence.enter(target.sessionId, userId)
      // A first frame at once: a client sees the stream open even when nothing is new yet.
      stream.send(after, eventBody('watch.ready', { sessionId: target.sessionId, after }))
      const emit = (entries: { seq: number }[]) => {
        for (const e of entries) {
          if (e.seq <= after) continue
          after = e.seq
          stream.send(after, eventBody('history', e))
        }
      }
      emit(first.data)
      let reading = false
      const poll = async () => {
        if (reading || stream.closed) return
        reading = true
        try {
          emit(((await transport.command(target, { type: 'query.history', after, limit: 1000 })) as { data: { seq: number }[] }).data)
        } catch (error) {
          // The session is gone: say so and end; any other failure is retried next tick.
          if (error instanceof NotFound) stream.end({ id: after, body: eventBody('session.gone', {}) })
        } finally {
          reading = false
        }
      }
      const timer = setInterval(() => void poll(), options.pollMs)
      timer.unref()
      let subscription: { unsubscribe(): void } | undefined
      try {
        subscription = await transport.subscribe(target, event => {
          stream.send(after, eventBody('channel', event))
          void poll()
        })
      } catch {
        // No live feed (the session just ended): the history poll still ends the stream.
      }
      sink.onClose(() => {
        clearInterval(timer)
        subscription?.unsubscribe()
        presence.leave(target.sessionId, userId)
      })
    },
  }
}

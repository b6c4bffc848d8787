// A supervisor's watch stream of one session: its whole timeline as it grows — the
// history entries (messages, whispers, tool calls and results, transfers, admin actions with
// their UserId), ids = history seq so Last-Event-ID resumes — plus the live channel events
// (event `channel`, no id: streamed chunks a history entry later sums up). It subscribes to the
// transport directly, so it is no channel consumer (no consumer slot, no delivery position).
// Presence: who watches which session, from the open watch streams of this process.
import { Invalid, NotFound } from '../../platform/errors.js'
import { OverloadGuard } from '../../platform/overload.js'
import { eventBody, HeartbeatWheel, parseLastEventId, SseStream } from '../../gateway/sse.js'
import type { StreamRoute } from '../../platform/http.js'
import type { SessionTransport } from '../transport.js'
import { userIdOf, uuidParam } from '../routes/common.js'
import { ADMIN_BASE } from '../routes/admin.js'

/** Who watches a session now, told when that set changes (not when a second tab of the same UserId opens). */
export interface PresenceChange {
  accountId: string
  sessionId: string
  watchers: string[]
}

export class Presence {
  private readonly watchers = new Map<string, Map<string, number>>()
  private readonly listeners = new Set<(change: PresenceChange) => void>()

  enter(sessionId: string, userId: string, accountId = '') {
    const users = this.watchers.get(sessionId) ?? new Map<string, number>()
    const n = users.get(userId) ?? 0
    users.set(userId, n + 1)
    this.watchers.set(sessionId, users)
    if (n === 0) this.changed(accountId, sessionId)
  }

  leave(sessionId: string, userId: string, accountId = '') {
    const users = this.watchers.get(sessionId)
    if (!users) return
    const n = (users.get(userId) ?? 1) - 1
    if (n > 0) users.set(userId, n)
    else users.delete(userId)
    if (!users.size) this.watchers.delete(sessionId)
    if (n <= 0) this.changed(accountId, sessionId)
  }

  /** Calls `listener` on every change of a session's watchers; returns the unsubscribe. */
  onChange(listener: (change: PresenceChange) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  private changed(accountId: string, sessionId: string) {
    const change = { accountId, sessionId, watchers: this.of(sessionId) }
    for (const listener of this.listeners) listener(change)
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
      "Supervisor watch stream (SSE): the session's history entries as they are written (first event watch.ready with the watchers; then event history, id = seq; resumable with Last-Event-ID), its live channel events (event channel) and who watches it as that changes (event presence); not a channel consumer. Watchers are listed as presence",
    requiredHeaders: ['UserId'],
    responses: {
      '200': { description: 'text/event-stream', schema: 'supervision.watch.stream' },
      '400': { description: 'USER_ID_REQUIRED, INVALID_USER_ID, INVALID_SESSION_ID, INVALID_LAST_EVENT_ID' },
      '401': { description: 'Missing or unknown apikey' },
      '403': { description: 'The key lacks the admin role' },
      '404': { description: "SESSION_NOT_FOUND (missing, destroyed, or another account's)" },
      '429': { description: "ACCOUNT_STREAM_LIMIT: this node is short of supervision streams and the account holds its share or more (Retry-After)" },
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
      // Presence events: who else watches, sent as it changes (this watcher included).
      const unpresence = presence.onChange(change => {
        if (change.sessionId === target.sessionId && change.accountId === target.accountId) stream.send(after, eventBody('presence', { watchers: change.watchers }))
      })
      presence.enter(target.sessionId, userId, target.accountId)
      // A first frame at once: a client sees the stream open even when nothing is new yet.
      stream.send(after, eventBody('watch.ready', { sessionId: target.sessionId, after, watchers: presence.of(target.sessionId) }))
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
        unpresence()
        presence.leave(target.sessionId, userId, target.accountId)
      })
    },
  }
}

// What a SessionHost is built with, and what it asks of the engine nodes' ownership of sessions
// (engine/cluster/ownership.ts keeps the leases).
import type { Platform } from '../../platform/index.js'
import type { Store } from '../../platform/store/index.js'
import type { SessionRecorder } from '../../reports/index.js'
import type { CrewCatalog } from '../crews.js'
import type { SessionRepository } from '../persistence/session-store.js'
import type { CheckpointPolicy } from '../persistence/session-writer.js'
import type { AssistantProvider } from '../providers/types.js'
import type { EventLog } from '../streams/event-log.js'

export interface HostOptions {
  platform: Platform
  crews: CrewCatalog
  recorder: SessionRecorder
  providers: Record<string, AssistantProvider>
  idleTimeoutMs: number
  maxToolRounds?: number
  /** Default deadline of external tools without their own timeoutMs. */
  externalToolTimeoutMs?: number
  /** Engine nodes over NATS: this node writes a session only while it holds the session's lease. */
  leases?: SessionLeases
  /** Where published events are kept for replay (default: in memory, SSE_REPLAY_BUFFER_EVENTS per session). */
  events?: EventLog
  /** A user message is acknowledged only once its history entry is written (survives a node's death). */
  durableAcks?: boolean
  /** Overrides ENGINE_HIBERNATE_AFTER_MS (0: never). */
  hibernateAfterMs?: number
  /** Batch size and retry policy of the write-behind (defaults in engine/persistence/session-writer.ts). */
  writeBehind?: { batch?: number; maxAttempts?: number; retryMs?: number; checkpoints?: CheckpointPolicy }
  /**
   * Where sessions persist (default: the platform's store). An OffLoopStore (writes in the
   * store's write thread, ENGINE_WRITE_THREAD) is released when the host stops.
   */
  store?: Store
  /**
   * Where sessions persist (default: a SessionStore on `store`). Engine nodes over NATS: the
   * journal on JetStream with MongoDB behind it (engine/cluster/journaled-session-store.ts).
   */
  repository?: SessionRepository
  /** How long a restore waits for its report record's position (default: as long as it takes; see engine/host/loading.ts). */
  recordReadMs?: number
}

/** Ownership of sessions across engine nodes; see engine/cluster/ownership.ts. */
export interface SessionLeases {
  /** The fencing token of this node's lease on the session, or undefined when it does not hold one. */
  token(sessionId: string): number | undefined
  /** The session left this node: `finished` (destroyed: the lease goes) or `dropped` (lease lost or lapsed). */
  unloaded(sessionId: string, why: 'finished' | 'dropped', accountId: string): void
}

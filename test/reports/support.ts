// Seeding helpers for the report tests: whole session records written through
// SessionRecorder.insert (the records plus their pre-aggregated blocks, as if each session had
// been opened and closed by the engine, whose writer is tested on its own in records.test.ts).
import { SessionRecorder, type SessionRecordDoc, type SessionStatus } from '../../reports/index.js'
import type { Store } from '../../platform/store/index.js'

/**
 * Report tests seed records at fixed dates and read them with the real clock (or the MongoDB
 * test server's TTL monitor does): retention is turned off for them, and tested in retention.test.ts.
 */
export const KEEP_FOREVER = { SESSION_RECORD_RETENTION_DAYS: '0', REPORT_BLOCK_RETENTION_DAYS: '0' }

export const SD = '/engine/v1/api/reports/sessions-detail'
export const ER = '/engine/v1/api/reports/execute-report'

let serial = 0

export function sessionRecord(r: Partial<SessionRecordDoc> & { start_time: number }): SessionRecordDoc {
  const id = r._id ?? r.session_id ?? `s-${String(++serial).padStart(6, '0')}`
  const status: SessionStatus = r.status ?? 'completed'
  const live = status === 'active' || status === 'paused'
  const duration = live ? null : r.duration ?? 60_000
  return {
    _id: id,
    session_id: id,
    accountId: 'acme',
    crew_id: 'crew-1',
    agent_id: 'agent-1',
    agents: [r.agent_id ?? 'agent-1'],
    end_time: live ? null : r.start_time + (duration ?? 0),
    duration,
    status,
    messages: 4,
    user_messages: 2,
    assistant_messages: 2,
    tool_calls: 0,
    transfers: 0,
    end_reason: live ? null : 'user_ended',
    ...r,
  }
}

export async function seed(store: Store, records: SessionRecordDoc[]) {
  const inserted = await new SessionRecorder(store).insert(records)
  if (inserted !== records.length) throw new Error(`seeded ${inserted} of ${records.length}`)
}

export const query = (params: Record<string, string | number | undefined>) =>
  '?' +
  Object.entries(params)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`)
    .join('&')

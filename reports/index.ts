// The reports module: session records (written by the engine) and the report endpoints.
export { SessionRecorder, type SessionRecordDoc, type SessionStatus, SESSION_RECORDS } from './session-records.js'

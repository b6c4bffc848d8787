// What the engine's JetStream streams share (the session event log, the session journal): a
// stream opened as it is, or created when missing; durations in nanoseconds; the refusal of a
// publish whose expected last subject sequence is not the stream's (the fencing of both).
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream'

export const nanos = (ms: number) => ms * 1_000_000

/** Opens the stream, creating it when missing; an existing one is used as it is (an operator may have changed it). */
export async function openStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string }) {
  try {
    await jsm.streams.info(config.name)
  } catch (error) {
    if (!(error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound)) throw error
    try {
      await jsm.streams.add(config)
    } catch {
      await jsm.streams.info(config.name) // created concurrently by another process: fine
    }
  }
}

/** Another writer appended to the subject since the sequence the publish expected. */
export const isWrongLastSequence = (error: unknown) =>
  error instanceof JetStreamApiError &&
  (error.code === JetStreamApiCodes.StreamWrongLastSequence || error.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)

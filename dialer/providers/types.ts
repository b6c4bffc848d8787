// The provider seam: the scheduler hands each claimed attempt to the provider of the batch's
// channel and records whatever outcome comes back. A provider never touches the store.
import type { AddressDoc } from '../collections.js'
import type { Outcome } from '../rules.js'

export interface AttemptRequest {
  attemptId: string
  accountId: string
  batchId: string
  contactId: string
  identifier: string
  channel: 'phone' | 'email' | 'whatsapp'
  address: AddressDoc
  /** 1 for the contact's first attempt. */
  attemptNumber: number
  name: string
  customFields: Record<string, unknown>
}

/**
 * Thrown by an attempt that goes on elsewhere (a receiver's call, an assistant session) when the
 * service stops: it is not recorded, it stays in flight, and the scheduler that takes this one's
 * claims over (the next process, or another worker) follows it to its end (Provider.resume).
 */
export class AttemptHandedOver extends Error {
  override name = 'AttemptHandedOver'
}

/** What a provider needs to follow an attempt it did not start here. */
export interface ResumedAttempt {
  attemptId: string
  accountId: string
  /** Service-clock time of its start. */
  startedAt: number
}

export interface AttemptResult {
  outcome: Outcome
  /** Free text kept with the attempt (a provider's reason or reference). */
  detail?: string
}

export interface Provider {
  readonly name: string
  /** Resolves when the attempt has ended; a rejection is recorded as outcome `failed`. */
  dial(attempt: AttemptRequest): Promise<AttemptResult>
  /**
   * Follows, from this process, an attempt whose scheduler died before it ended (its process was
   * killed) and that goes on elsewhere (a webhook receiver's call, a restorable assistant
   * session): resolves when it ends. Providers without it have attempts that died with their
   * process (closed as `failed`).
   */
  resume?(attempt: ResumedAttempt): Promise<AttemptResult>
}

// The dialing scheduler. A selection cycle, for every running batch:
//   1. reads the batch's due contacts (state pending, nextAttemptAt <= now), ordered by
//      contactPriority (lower first, as the spec says; unset last) then nextAttemptAt, or the other way round with
//      rules.priorityOrder = scheduledAt, as many as pacing leaves room for;
//   2. checks each against the rules and the account's blocked list *now* (not at load): a
//      contact outside its window, on a blocked date or scheduled later gets nextAttemptAt moved
//      to its next allowed instant and lastSkipReason recorded; a contact whose addresses are all
//      blocked, or with no attempts left, is done (doneReason says why);
//   3. claims each dialable contact with one conditional update (pending and due -> in_progress,
//      claimedBy), so of two schedulers racing on a contact exactly one wins;
//   4. records the attempt (outcome null = in flight) and hands it to the channel's provider;
//      when the provider answers, the attempt gets its outcome and the contact its counters and
//      either a retry time or `done`;
//   5. marks the batch `completed` (log entry by `system`) when nothing is left to dial.
// Pacing: attempts in flight per batch (config, lowered by rules.maxInFlight) and per account,
// and attempts started per minute per batch (rules.maxAttemptsPerMinute) and per account
// (DIALER_MAX_ATTEMPTS_PER_MINUTE_PER_ACCOUNT): a sliding 60 s window over the attempts'
// startedAt. All counted in the store so every scheduler sees the same numbers (two schedulers
// claiming in the same instant may overshoot by what each claims in that instant).
// Stopping a batch stops new claims at once (the status is re-read before every round of
// claims); attempts in flight finish and are recorded.
// Lost claims: every scheduler beats (presence.ts); the claims of one that stopped beating (its
// process died, or stopped) are taken over when their attempts go on elsewhere (followed to
// their end), else released and dialed again.
import type { Platform } from '../../platform/index.js'
import type { Collection } from '../../platform/store/index.js'
import { newId, newOrderedId } from '../../platform/ids.js'
import { COLLECTIONS, type AddressDoc, type ContactDoc } from '../collections.js'
import { ActiveContacts } from '../active-contacts.js'
import { SchedulerPresence } from './presence.js'
import type { BatchDoc } from '../batches.js'
import type { BatchLog } from '../batch-log.js'
import type { Attempts } from '../attempts.js'
import type { ProviderFor } from '../providers/index.js'
import { AttemptHandedOver, type AttemptResult } from '../providers/types.js'
import { blockLookup } from '../blocked-addresses.js'
import { addressKey, afterOutcome, type BatchRules, dialability, type NotDialableReason, type Outcome, selectsByDueTime } from '../rules.js'

/** Rounds of (select, check, claim) per batch and cycle; each round fills the room left. */
const MAX_ROUNDS = 8
/** A contact with no allowed time within a year is looked at again after a day. */
const NO_WINDOW_RECHECK_MS = 24 * 60 * 60_000
/** The per-minute pacing window: attempts started in the last 60 s (sliding). */
const RATE_WINDOW_MS = 60_000
/** Lost claims are looked for at least this often (and every quarter of the claim timeout, half the dead-after time, if shorter). */
const MAX_RECOVERY_INTERVAL_MS = 60_000

export interface CycleReport {
  batches: number
  claimed: number
  skipped: Partial<Record<NotDialableReason, number>>
  completed: string[]
}

export class Scheduler {
  private readonly contacts: Collection<ContactDoc>
  private readonly active: ActiveContacts
  private readonly batchDocs: Collection<BatchDoc>
  private readonly operations: Collection
  private readonly blocked: Collection<{ _id: string; accountId: string; addressType: string; address: string }>
  private readonly inFlight = new Map<string, Promise<void>>()
  /** This scheduler's beats, and which others beat lately. */
  private readonly presence: SchedulerPresence
  private timer?: NodeJS.Timeout
  private cycle?: Promise<CycleReport>
  private stopped = false
  /** Service-clock time of the last look for expired claims (the first cycle looks). */
  private recoveredAt = -Infinity

  constructor(
    private readonly platform: Platform,
    private readonly deps: { log: BatchLog; attempts: Attempts; providers: ProviderFor; finished?: () => void },
    readonly workerId: string = `scheduler-${newId()}`,
  ) {
    this.contacts = platform.store.collection<ContactDoc>(COLLECTIONS.contacts)
    this.active = new ActiveContacts(platform.store)
    this.batchDocs = platform.store.collection<BatchDoc>(COLLECTIONS.batches)
    this.operations = platform.store.collection(COLLECTIONS.operations)
    this.blocked = platform.store.collection(COLLECTIONS.blocked)
    this.presence = new SchedulerPresence(platform.store, platform.clock, workerId, platform.config.dialer.schedulerDeadAfterMs)
  }

  /** Runs a cycle every `intervalMs` (after the previous one finished); 0 = never (tests call runCycle). */
  start(intervalMs: number) {
    this.stopped = false
    this.presence.start(error => this.platform.logger.warn('dialer scheduler beat not written', { error, workerId: this.workerId }))
    if (intervalMs <= 0) return
    const tick = async () => {
      try {
        await this.runCycle()
      } catch (error) {
        this.platform.logger.error('dialer selection cycle failed', { error, workerId: this.workerId })
      }
      if (!this.stopped) this.timer = setTimeout(tick, intervalMs).unref()
    }
    this.timer = setTimeout(tick, intervalMs).unref()
  }

  /** No new cycles; the current one and every attempt in flight finish (and are recorded). */
  async stop() {
    this.stopped = true
    clearTimeout(this.timer)
    await this.cycle?.catch(() => undefined)
    await this.drain()
    await this.presence.stop().catch(error => this.platform.logger.warn('dialer scheduler beat not removed (others take its claims over once it is old)', { error, workerId: this.workerId }))
  }

  get attemptsInFlight() {
    return this.inFlight.size
  }

  /** Resolves once every attempt this scheduler dispatched has been recorded. */
  async drain() {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight.values()])
  }

  /** One selection cycle (cycles of one scheduler never overlap). */
  async runCycle(): Promise<CycleReport> {
    while (this.cycle) await this.cycle.catch(() => undefined)
    const cycle = this.select().finally(() => {
      this.cycle = undefined
    })
    this.cycle = cycle
    return cycle
  }

  private async select(): Promise<CycleReport> {
    const now = this.platform.clock.now()
    const report: CycleReport = { batches: 0, claimed: 0, skipped: {}, completed: [] }
    await this.presence.beatIfDue()
    // Claims are lost on the scale of DIALER_SCHEDULER_DEAD_AFTER_MS and DIALER_CLAIM_TIMEOUT_MS:
    // looking for them every cycle read every contact in flight each time (1,000 in flight: most
    // of a cycle's CPU).
    const { claimTimeoutMs } = this.platform.config.dialer
    if (now - this.recoveredAt >= Math.min(claimTimeoutMs / 4, this.presence.deadAfterMs / 2, MAX_RECOVERY_INTERVAL_MS)) {
      this.recoveredAt = now
      await this.recoverExpiredClaims(now)
    }
    const running = await this.batchDocs.find({ status: 'running' }, { sort: { createdAt: 1, _id: 1 } })
    const accountInFlight = new Map<string, number>()
    const accountStarted = new Map<string, number>()
    // Batches of one account share its room: each gets an even share of what is left.
    const batchesLeft = new Map<string, number>()
    for (const batch of running) batchesLeft.set(batch.accountId, (batchesLeft.get(batch.accountId) ?? 0) + 1)
    for (const batch of running) {
      report.batches++
      const share = batchesLeft.get(batch.accountId)!
      batchesLeft.set(batch.accountId, share - 1)
      await this.selectBatch(batch, now, { inFlight: accountInFlight, started: accountStarted }, share, report)
      if (await this.completeIfDone(batch)) report.completed.push(batch._id)
    }
    return report
  }

  /**
   * Contacts claimed by a scheduler that stopped beating (its process died), or longer than
   * DIALER_CLAIM_TIMEOUT_MS ago (a scheduler that lives but lost track of them): the attempt is
   * closed as `failed` and the contact is due again. A dead (or stopped) scheduler's attempt that
   * goes on elsewhere (a webhook receiver's call, an assistant session) is taken over instead:
   * this scheduler follows it to its outcome (Provider.resume) and records it, and the contact is
   * not dialed a second time.
   */
  private async recoverExpiredClaims(now: number) {
    const expired = new Date(now - this.platform.config.dialer.claimTimeoutMs)
    const alive = await this.presence.alive(now)
    const [orphaned, timedOut] = await Promise.all([
      this.contacts.find({ state: 'in_progress', claimedBy: { $nin: alive } }, { limit: 1000 }),
      this.contacts.find({ state: 'in_progress', claimedAt: { $lt: expired } }, { limit: 1000 }),
    ])
    const deadFor = Math.round(this.presence.deadAfterMs / 1000)
    const lost = new Map<string, { contact: ContactDoc; detail: string; dead: boolean }>()
    for (const contact of timedOut) lost.set(contact._id, { contact, detail: 'claim expired: the scheduler running this attempt was lost', dead: false })
    for (const contact of orphaned) lost.set(contact._id, { contact, detail: `scheduler lost: the scheduler running this attempt has not been seen for ${deadFor} s`, dead: true })
    const batches = new Map<string, BatchDoc | null>()
    for (const { contact, detail, dead } of lost.values()) {
      if (dead && (await this.takeOver(contact, batches))) continue
      const released = await this.contacts.updateOne(
        { _id: contact._id, state: 'in_progress', claimedBy: contact.claimedBy, claimedAt: contact.claimedAt },
        { $set: { state: 'pending', nextAttemptAt: new Date(now), claimedBy: null, claimedAt: null, lastSkipReason: 'claim_expired', updatedAt: new Date(now) } },
      )
      if (released.matchedCount === 0) continue
      await this.deps.attempts.docs.updateMany({ contactId: contact._id, outcome: null, workerId: contact.claimedBy }, { $set: { outcome: 'failed', detail, endedAt: new Date(now) } })
    }
  }

  /** Takes a dead scheduler's claim and attempt over when the attempt's provider can follow it from here; false when it cannot. */
  private async takeOver(contact: ContactDoc, batches: Map<string, BatchDoc | null>): Promise<boolean> {
    const attempt = await this.deps.attempts.docs.findOne({ contactId: contact._id, outcome: null, workerId: contact.claimedBy })
    if (!attempt) return false
    let batch = batches.get(contact.batchId)
    if (batch === undefined) batches.set(contact.batchId, (batch = await this.batchDocs.findOne({ _id: contact.batchId })))
    if (!batch) return false
    const provider = this.deps.providers(batch.channel, batch.rules ?? {})
    if (provider.name !== attempt.provider || !provider.resume) return false
    const resume = provider.resume.bind(provider)
    // Another scheduler looking at the same time: one of them takes it.
    const taken = await this.contacts.updateOne({ _id: contact._id, state: 'in_progress', claimedBy: contact.claimedBy, claimedAt: contact.claimedAt }, { $set: { claimedBy: this.workerId } })
    if (taken.matchedCount === 0) return true
    await this.deps.attempts.docs.updateOne({ _id: attempt._id, outcome: null }, { $set: { workerId: this.workerId } })
    const address = contact.addresses.find(a => a.address === attempt.address) ?? { address: attempt.address, type: attempt.type, priority: 0 }
    this.follow(batch, { ...contact, claimedBy: this.workerId }, address, attempt._id, () =>
      resume({ attemptId: attempt._id, accountId: attempt.accountId, startedAt: new Date(attempt.startedAt).getTime() }),
    )
    return true
  }

  private async selectBatch(
    batch: BatchDoc,
    now: number,
    account: { inFlight: Map<string, number>; started: Map<string, number> },
    share: number,
    report: CycleReport,
  ) {
    const { config } = this.platform
    const accountInFlight = account.inFlight
    const rules = (batch.rules ?? {}) as BatchRules
    const batchLimit = Math.min(config.dialer.maxInFlightPerBatch, rules.maxInFlight ?? Infinity)
    const accountLimit = config.dialer.maxInFlightPerAccount
    let batchBusy = await this.contacts.countDocuments({ batchId: batch._id, state: 'in_progress' })
    if (!accountInFlight.has(batch.accountId)) {
      accountInFlight.set(batch.accountId, await this.contacts.countDocuments({ accountId: batch.accountId, state: 'in_progress' }))
    }
    const byDueTime = selectsByDueTime(batch.rules)
    const sort: Record<string, 1 | -1> = byDueTime ? { nextAttemptAt: 1, priorityRank: 1, _id: 1 } : { priorityRank: 1, nextAttemptAt: 1, _id: 1 }
    // `dueOrdered` pins the due-time index, which holds only such batches' contacts.
    const dueFilter = byDueTime ? { batchId: batch._id, state: 'pending' as const, dueOrdered: true as const } : { batchId: batch._id, state: 'pending' as const }
    const dueBy = new Date(now)
    const accountShare = Math.ceil((accountLimit - accountInFlight.get(batch.accountId)!) / share)
    // Per minute: attempts started in (now - 60 s, now], counted only when a limit is set.
    const windowStart = new Date(now - RATE_WINDOW_MS)
    const batchRate = rules.maxAttemptsPerMinute ?? Infinity
    const accountRate = config.dialer.maxAttemptsPerMinutePerAccount || Infinity
    let batchStarted = Number.isFinite(batchRate) ? await this.deps.attempts.docs.countDocuments({ batchId: batch._id, startedAt: { $gt: windowStart } }) : 0
    if (Number.isFinite(accountRate) && !account.started.has(batch.accountId)) {
      account.started.set(batch.accountId, await this.deps.attempts.docs.countDocuments({ accountId: batch.accountId, startedAt: { $gt: windowStart } }))
    }
    const accountStarted = () => account.started.get(batch.accountId) ?? 0
    const accountRateShare = Math.ceil((accountRate - accountStarted()) / share)
    let claimedHere = 0

    for (let round = 0; round < MAX_ROUNDS; round++) {
      const room = Math.min(
        batchLimit - batchBusy,
        accountShare - claimedHere,
        accountLimit - accountInFlight.get(batch.accountId)!,
        batchRate - batchStarted,
        accountRateShare - claimedHere,
        accountRate - accountStarted(),
      )
      if (room <= 0 || this.stopped) return
      const due = await this.contacts.find({ ...dueFilter, nextAttemptAt: { $lte: dueBy } }, { sort, limit: room })
      if (due.length === 0) return
      // A stop (or delete) since the cycle began: no new claims.
      const current = await this.batchDocs.findOne({ _id: batch._id }, { projection: { status: 1 } })
      if (current?.status !== 'running') return
      const blocked = await this.blockedAmong(batch.accountId, due)
      let progressed = false
      const dialable: { contact: ContactDoc; address: AddressDoc }[] = []
      const passedOver: Promise<void>[] = []
      for (const contact of due) {
        const verdict = dialability({ rules, batchStatus: 'running', contact, now, blocked })
        if (verdict.dialable) {
          dialable.push({ contact, address: verdict.address })
          continue
        }
        passedOver.push(this.passOver(contact, verdict.reason, verdict.nextEligibleAt, now))
        report.skipped[verdict.reason] = (report.skipped[verdict.reason] ?? 0) + 1
        progressed = true
      }
      // The round's claims, passes and attempt records go to the store together, not one
      // awaited write after another: the embedded store commits them as one transaction, MongoDB
      // runs them side by side. Each claim stays a conditional update of its own contact.
      const claims = await Promise.all(
        dialable.map(({ contact }) =>
          this.contacts.findOneAndUpdate(
            // claimedBy null: not still being dialed by an attempt from before a recontact/reschedule.
            { _id: contact._id, state: 'pending', nextAttemptAt: { $lte: dueBy }, claimedBy: null },
            { $set: { state: 'in_progress', claimedBy: this.workerId, claimedAt: dueBy, updatedAt: dueBy } },
            { returnDocument: 'after' },
          ),
        ),
      )
      await Promise.all(passedOver)
      const dispatched: Promise<void>[] = []
      claims.forEach((claimed, i) => {
        if (!claimed) return // another scheduler won it
        progressed = true
        batchBusy++
        claimedHere++
        accountInFlight.set(batch.accountId, accountInFlight.get(batch.accountId)! + 1)
        batchStarted++
        account.started.set(batch.accountId, accountStarted() + 1)
        report.claimed++
        dispatched.push(this.dispatch(batch, claimed, dialable[i]!.address, now))
      })
      await Promise.all(dispatched)
      if (!progressed) return
    }
  }

  /** blockKey()s of the account's blocked addresses among these contacts' addresses. */
  private async blockedAmong(accountId: string, contacts: ContactDoc[]): Promise<Set<string>> {
    const addresses = contacts.flatMap(c => c.addresses)
    if (addresses.length === 0) return new Set()
    // Blocks of erased people hold a digest of the address instead (dialer/erasure.ts).
    const lookup = blockLookup(accountId, addresses)
    const docs = await this.blocked.find({ accountId, address: { $in: lookup.values } }, { projection: { addressType: 1, address: 1 } })
    return new Set(docs.map(lookup.keyOf))
  }

  /** Not dialable now: move it to its next allowed time, or close it when it never will be. */
  private async passOver(contact: ContactDoc, reason: NotDialableReason, nextEligibleAt: number | null, now: number) {
    const guard = { _id: contact._id, state: 'pending' as const, nextAttemptAt: contact.nextAttemptAt }
    const at = new Date(now)
    if (reason === 'blocked' || reason === 'attempts_exhausted') {
      await this.contacts.updateOne(guard, { $set: { state: 'done', doneReason: reason, lastSkipReason: reason, updatedAt: at } })
      await this.active.reconcile(contact.accountId, { ids: [contact._id] })
      return
    }
    const next = nextEligibleAt ?? now + NO_WINDOW_RECHECK_MS
    await this.contacts.updateOne(guard, { $set: { nextAttemptAt: new Date(next), lastSkipReason: reason, updatedAt: at } })
  }

  /** Records the attempt as in flight, then lets the provider run it in the background. */
  private async dispatch(batch: BatchDoc, contact: ContactDoc, address: AddressDoc, now: number) {
    const provider = this.deps.providers(batch.channel, batch.rules ?? {})
    const attemptId = newOrderedId()
    const attemptNumber = contact.attempts + 1
    await this.deps.attempts.begin({
      _id: attemptId,
      accountId: contact.accountId,
      batchId: contact.batchId,
      contactId: contact._id,
      identifier: contact.identifier,
      address: address.address,
      type: address.type,
      attemptNumber,
      provider: provider.name,
      workerId: this.workerId,
      outcome: null,
      detail: null,
      startedAt: new Date(now),
      endedAt: null,
    })
    this.follow(batch, contact, address, attemptId, () =>
      provider.dial({
        attemptId,
        accountId: contact.accountId,
        batchId: contact.batchId,
        contactId: contact._id,
        identifier: contact.identifier,
        channel: batch.channel,
        address,
        attemptNumber,
        name: contact.name,
        customFields: contact.customFields ?? {},
      }),
    )
  }

  /** Runs the provider's side of an attempt in the background (a throw counts as `failed`), then records its result. */
  private follow(batch: BatchDoc, contact: ContactDoc, address: AddressDoc, attemptId: string, result: () => Promise<AttemptResult>) {
    const run = (async () => {
      let outcome: Outcome
      let detail: string | null
      try {
        const ended = await result()
        outcome = ended.outcome
        detail = ended.detail ?? null
      } catch (error) {
        // Goes on elsewhere: left in flight for the scheduler that takes this one's claims over.
        if (error instanceof AttemptHandedOver) return
        outcome = 'failed'
        detail = `provider error: ${(error as Error).message}`
      }
      await this.record(batch, contact, address, attemptId, outcome, detail)
    })()
      .catch(error => this.platform.logger.error('dialer attempt could not be recorded', { error, attemptId }))
      .finally(() => this.inFlight.delete(attemptId))
    this.inFlight.set(attemptId, run)
  }

  private async record(batch: BatchDoc, contact: ContactDoc, address: AddressDoc, attemptId: string, outcome: Outcome, detail: string | null) {
    const endedAt = this.platform.clock.now()
    const at = new Date(endedAt)
    await this.deps.attempts.finish(attemptId, outcome, detail, at)
    const next = afterOutcome((batch.rules ?? {}) as BatchRules, contact, address.address, outcome, endedAt)
    const inc = { attempts: 1, [`addressAttempts.${addressKey(address.address)}`]: 1 }
    const settled = await this.contacts.updateOne(
      { _id: contact._id, state: 'in_progress', claimedBy: this.workerId },
      {
        $inc: inc,
        $set: {
          state: next.state,
          nextAttemptAt: next.nextAttemptAt === null ? at : new Date(next.nextAttemptAt),
          doneReason: next.doneReason,
          lastOutcome: outcome,
          lastSkipReason: null,
          claimedBy: null,
          claimedAt: null,
          updatedAt: at,
        },
      },
    )
    // Cancelled, recontacted or released (claim expired) meanwhile: count the attempt, keep that
    // decision and its outcome, and let go of the claim so the contact can be dialed again.
    if (settled.matchedCount === 0) {
      await this.contacts.updateOne({ _id: contact._id }, { $inc: inc, $set: { updatedAt: at } })
      await this.contacts.updateOne({ _id: contact._id, claimedBy: this.workerId }, { $set: { claimedBy: null, claimedAt: null } })
    } else if (next.state !== 'pending') {
      await this.active.reconcile(contact.accountId, { ids: [contact._id] })
    }
  }

  /** running -> completed once no contact is pending or in flight (exactly one caller logs it). */
  private async completeIfDone(batch: BatchDoc): Promise<boolean> {
    // One equality per state: each is one key of the (state, batchId) index, so the embedded store
    // stops at the first contact instead of gathering the batch's pending contacts first.
    for (const state of ['in_progress', 'pending'] as const) {
      if (await this.contacts.findOne({ batchId: batch._id, state }, { projection: { _id: 1 } })) return false
    }
    // A started batch without any contact yet waits for its first load, and one whose load is
    // still being applied waits for the rest of its contacts.
    if (!(await this.contacts.findOne({ batchId: batch._id }, { projection: { _id: 1 } }))) return false
    const loading = await this.operations.findOne({
      batchId: batch._id,
      kind: 'contacts.load',
      status: { $in: ['pending', 'running'] },
      expiresAt: { $gt: new Date(this.platform.clock.now()) },
    })
    if (loading) return false
    const at = new Date(this.platform.clock.now())
    // Its retention counts from here (dialer/retention.ts stamps its contacts).
    const moved = await this.batchDocs.findOneAndUpdate(
      { _id: batch._id, status: 'running' },
      { $set: { status: 'completed', updatedAt: at, finishedAt: at, stampsWanted: true }, $inc: { stampsPending: 1 }, $unset: { purgedAt: '' } },
    )
    if (!moved) return false
    this.deps.finished?.()
    await this.deps.log.append({
      accountId: batch.accountId,
      batchId: batch._id,
      operation: 'completed',
      actor: { id: 'system' },
      details: { reason: 'nothing_left_to_dial' },
    })
    return true
  }
}

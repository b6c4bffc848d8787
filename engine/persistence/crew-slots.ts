// The crews' concurrent-session limit (the channel's 429), counted in the store so every node
// counts the same sessions. A slot document per (account, crew) holds the live count; taking a
// slot is one conditional upsert: when the count is at the limit the filter matches nothing and
// the upsert collides with the existing document's _id, which is the "full" answer.
import { LimitReached } from '../../platform/errors.js'
import { DuplicateKeyError, type Collection, type Doc, type Store } from '../../platform/store/index.js'
import type { Crew } from '../crews.js'

export const CREW_SLOTS = 'engine_crew_slots'

interface SlotDoc extends Doc {
  live: number
}

export class CrewSlots {
  private readonly slots: Collection<SlotDoc>
  constructor(store: Store) {
    this.slots = store.collection<SlotDoc>(CREW_SLOTS)
  }

  async acquire(accountId: string, crew: Crew) {
    try {
      await this.slots.findOneAndUpdate(
        { _id: `${accountId}:${crew.id}`, live: { $lt: crew.maxConcurrentSessions } },
        { $inc: { live: 1 } },
        { upsert: true },
      )
    } catch (error) {
      if (!(error instanceof DuplicateKeyError)) throw error
      throw new LimitReached(
        'SESSION_LIMIT_REACHED',
        `Crew ${crew.id} already has ${crew.maxConcurrentSessions} live sessions for this account; close one and retry`,
        { limit: crew.maxConcurrentSessions },
      )
    }
  }

  async release(accountId: string, crewId: string) {
    await this.slots.updateOne({ _id: `${accountId}:${crewId}`, live: { $gt: 0 } }, { $inc: { live: -1 } })
  }
}

// The dialer's data migrations, each recorded once per database in `dialer_migrations` (its id,
// when it was done), so a later start pays one read for it.
import type { Collection, Store } from '../platform/store/index.js'
import { COLLECTIONS } from './collections.js'

export class Migrations {
  private readonly docs: Collection
  constructor(store: Store) {
    this.docs = store.collection(COLLECTIONS.migrations)
  }

  async done(id: string): Promise<boolean> {
    return (await this.docs.findOne({ _id: id })) !== null
  }

  /** Idempotent: several processes finishing the same migration record it once. */
  async record(id: string) {
    await this.docs.updateOne({ _id: id }, { $setOnInsert: { doneAt: new Date() } }, { upsert: true })
  }
}

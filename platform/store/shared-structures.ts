// msgpackr's record structures shared by every document of a collection (the lmdb-js
// `sharedStructuresKey` feature, kept in a database of their own). Without them each encoded
// document carries its own key names and each decoding reads them again; with them a document is
// written as a structure id and its values, and decoded by a reader compiled once per structure.
// Documents written before are self-describing and stay readable.
//
// Not under a key of the documents' database, as lmdb-js would keep them: a range read that
// starts nowhere in particular (`getRange({ start: undefined })`, as index builds and moves do)
// would return that entry among the documents.
import type { Database } from 'lmdb'

/**
 * Keys that are data rather than field names (an address keying a contact's attempts per address:
 * a phone number, an e-mail) must not be shared: a shared structure is kept for good, for every
 * document, and would keep a person's address after the documents that held it are gone.
 */
const DATA_KEY = /^[0-9+]|@/
const shareable = (keys: string[]) => !keys.some(key => DATA_KEY.test(key))

/** The encoder options that keep one collection's structures under `key` of `db`. */
export function sharedStructures(db: Database<unknown, string>, key: string) {
  return {
    shouldShareStructure: shareable,
    getStructures: () => db.get(key),
    // Another thread or process may have added structures since this one read them: msgpackr
    // then reloads them and tries again (isCompatible is its check of what it had read).
    saveStructures: (structures: unknown[], isCompatible: ((existing: unknown) => boolean) | number) =>
      db.transactionSync(() => {
        const existing = db.get(key) as unknown[] | undefined
        const compatible = typeof isCompatible === 'function' ? isCompatible(existing) : !existing || existing.length === isCompatible
        if (!compatible) return false
        db.putSync(key, structures)
        return true
      }),
  }
}

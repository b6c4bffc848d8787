// Where a store holds given texts, read generically: on MongoDB every document of every
// collection the database lists; on the embedded store every key and value of every database
// of the LMDB environment (documents, index entries, counts, ordered logs, work queues,
// metadata), as raw bytes, so nothing is missed for not being read through a collection.
// Texts are found case-insensitively (ASCII).
import { MongoClient } from 'mongodb'
import type { RunningService } from '../../service.js'
import { LmdbStore } from '../../platform/store/lmdb-store.js'

/** For each text, the places (database or collection, then the key or _id) that hold it. */
export async function placesHolding(service: RunningService, mongoUrl: string | undefined, texts: string[]): Promise<Map<string, Set<string>>> {
  const needles = texts.map(t => t.toLowerCase())
  const found = new Map(texts.map(t => [t, new Set<string>()]))
  const note = (place: string, haystack: string) => {
    const lower = haystack.toLowerCase()
    needles.forEach((needle, i) => {
      if (lower.includes(needle)) found.get(texts[i]!)!.add(place)
    })
  }
  const store = service.platform.store
  if (store instanceof LmdbStore) {
    for (const name of store.env.getKeys({})) {
      const db = store.env.openDB({ name: String(name), encoding: 'binary', keyEncoding: 'binary' } as { name: string })
      for (const { key, value } of db.getRange({})) {
        const k = Buffer.from(key as unknown as Uint8Array)
        // latin1: one character per byte, so UTF-8 text reads as its bytes and nothing fails to decode.
        note(`${String(name)} ${k.toString('hex')}`, `${k.toString('latin1')}\n${Buffer.from(value as Uint8Array).toString('latin1')}`)
      }
    }
    return found
  }
  if (!mongoUrl) throw new Error('placesHolding: a MongoDB store needs its URL')
  const client = await MongoClient.connect(mongoUrl)
  try {
    const db = client.db()
    for (const { name } of await db.listCollections({}, { nameOnly: true }).toArray()) {
      for (const doc of await db.collection(name).find({}).toArray()) note(`${name} ${String(doc._id)}`, JSON.stringify(doc))
    }
  } finally {
    await client.close()
  }
  return found
}

/** Every place of `places` as one sorted list (for comparing two readings). */
export const allPlaces = (places: Map<string, Set<string>>) => [...new Set([...places.values()].flatMap(set => [...set]))].sort()

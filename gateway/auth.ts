// API keys: bootstrap keys from API_KEYS plus keys issued by the `keys` CLI into the store.
// A key is stored only as its SHA-256 digest (keys are 256-bit random strings, so a fast hash
// is enough; there is nothing to brute-force), looked up by digest and compared with
// timingSafeEqual. The key itself is never stored or logged.
//
// A key verified lately is found again by its text in a bounded cache held in memory only, so
// a request does not hash its key: a hash-table lookup compares text only once the hash of the
// whole presented string matches, so its timing tells nothing about a nearby key. Entries live
// as long as known-key lookups do (a revocation takes that long).
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import type { Gauge } from 'prom-client'
import type { Principal, Role } from '../platform/principal.js'
import type { Store } from '../platform/store/index.js'
import { newId, stableId } from '../platform/ids.js'

export const ALL_ROLES: readonly Role[] = ['dialer', 'channel', 'admin', 'reports']

interface KeyRecord {
  _id: string
  digest: string
  accountId: string
  roles: Role[]
  name: string
  createdAt: Date
  revokedAt: Date | null
}

const digestOf = (key: string) => createHash('sha256').update(key, 'utf8').digest('hex')

function sameDigest(a: string, b: string) {
  const x = Buffer.from(a, 'hex')
  const y = Buffer.from(b, 'hex')
  return x.length === y.length && timingSafeEqual(x, y)
}

function parseRoles(text: string | undefined, source: string): Role[] {
  if (!text) return [...ALL_ROLES]
  const roles = text.split('+').map(r => r.trim())
  for (const role of roles) {
    if (!ALL_ROLES.includes(role as Role)) throw new Error(`${source}: unknown role "${role}" (roles: ${ALL_ROLES.join(', ')})`)
  }
  return roles as Role[]
}

/** API_KEYS="key=account[:role+role],..."; returns principals by digest. */
export function parseBootstrapKeys(spec: string): Map<string, Principal> {
  const keys = new Map<string, Principal>()
  for (const [position, entry] of spec.split(',').map(s => s.trim()).filter(Boolean).entries()) {
    const match = /^([^=]+)=([^:]+)(?::(.*))?$/.exec(entry)
    if (!match) throw new Error(`API_KEYS entry ${position + 1} must look like key=account[:role+role]`)
    const [, key, accountId, roles] = match
    if (key!.length < 16) throw new Error(`API_KEYS entry ${position + 1}: a key must be at least 16 characters`)
    const digest = digestOf(key!)
    keys.set(digest, {
      // A stable uuid per bootstrap key, so audit records name it like an issued key.
      keyId: stableId(`api-key:${digest}`),
      keyName: `bootstrap key ${position + 1}`,
      accountId: accountId!,
      roles: new Set(parseRoles(roles, `API_KEYS entry ${position + 1}`)),
    })
  }
  return keys
}

export interface KeyCacheOptions {
  /** Lookups kept at most, for known and for unknown keys each (least recently used go first). */
  max: number
  /** How long a found key is trusted without asking the store (a revocation takes this long). */
  ttlMs: number
  /** How long an unknown key is remembered as unknown (a key issued meanwhile waits this long). */
  negativeTtlMs: number
}

export const DEFAULT_KEY_CACHE: KeyCacheOptions = { max: 10_000, ttlMs: 10_000, negativeTtlMs: 2_000 }

/**
 * Two bounded LRU caches: known keys, and unknown keys only briefly, so a flood of random keys
 * costs bounded memory and cannot push the known keys out.
 */
export class KeyRegistry {
  private readonly known: LRUCache<string, Principal> | undefined
  private readonly unknown: LRUCache<string, true> | undefined
  /** Keys verified lately, by the text presented. */
  private readonly verifiedKeys: LRUCache<string, Principal> | undefined

  constructor(
    private readonly bootstrap: Map<string, Principal>,
    private readonly store: Store,
    cache: KeyCacheOptions = DEFAULT_KEY_CACHE,
    private readonly entriesGauge?: Gauge<'kind'>,
  ) {
    // A ttl of 0 turns that cache off (lru-cache would read 0 as "never expires").
    const max = Math.max(1, cache.max)
    if (cache.ttlMs > 0) {
      this.known = new LRUCache({ max, ttl: cache.ttlMs })
      this.verifiedKeys = new LRUCache({ max, ttl: cache.ttlMs })
    }
    if (cache.negativeTtlMs > 0) this.unknown = new LRUCache({ max, ttl: cache.negativeTtlMs })
  }

  static collection = 'api_keys'

  async init() {
    await this.store.ensureIndexes(KeyRegistry.collection, [{ name: 'digest_unique', key: { digest: 1 }, unique: true }])
  }

  /** The principal of a key verified lately (no digest computed, nothing awaited); undefined: ask authenticate(). */
  verified(presented: string | undefined): Principal | undefined {
    return presented ? this.verifiedKeys?.get(presented) : undefined
  }

  /** Resolves a presented key to its principal, or null. */
  async authenticate(presented: string | undefined): Promise<Principal | null> {
    if (!presented) return null
    const verified = this.verifiedKeys?.get(presented)
    if (verified) return verified
    const principal = await this.lookup(presented, digestOf(presented))
    if (principal) this.verifiedKeys?.set(presented, principal)
    return principal
  }

  private async lookup(presented: string, digest: string): Promise<Principal | null> {
    for (const [known, principal] of this.bootstrap) if (sameDigest(known, digest)) return principal
    const cached = this.known?.get(digest)
    if (cached) return cached
    if (this.unknown?.get(digest)) return null
    const record = await this.store.collection<KeyRecord>(KeyRegistry.collection).findOne({ digest, revokedAt: null })
    const principal =
      record && sameDigest(record.digest, digest)
        ? { keyId: record._id, keyName: record.name, accountId: record.accountId, roles: new Set(record.roles) }
        : null
    if (principal) this.known?.set(digest, principal)
    else this.unknown?.set(digest, true)
    this.entriesGauge?.set({ kind: 'known' }, this.known?.size ?? 0)
    this.entriesGauge?.set({ kind: 'unknown' }, this.unknown?.size ?? 0)
    return principal
  }

  /** Issues a new key; the plaintext is returned once and never stored. */
  async issue(accountId: string, roles: Role[], name: string): Promise<{ keyId: string; key: string }> {
    const key = `sk_${randomBytes(32).toString('base64url')}`
    const keyId = newId()
    await this.store.collection<KeyRecord>(KeyRegistry.collection).insertOne({
      _id: keyId,
      digest: digestOf(key),
      accountId,
      roles,
      name,
      createdAt: new Date(),
      revokedAt: null,
    })
    return { keyId, key }
  }

  async revoke(keyId: string): Promise<boolean> {
    const r = await this.store
      .collection<KeyRecord>(KeyRegistry.collection)
      .updateOne({ _id: keyId, revokedAt: null }, { $set: { revokedAt: new Date() } })
    return r.matchedCount === 1
  }

  async list(accountId?: string) {
    const records = await this.store
      .collection<KeyRecord>(KeyRegistry.collection)
      .find(accountId ? { accountId } : {}, { sort: { createdAt: 1 } })
    return records.map(r => ({ keyId: r._id, accountId: r.accountId, roles: r.roles, name: r.name, createdAt: r.createdAt, revokedAt: r.revokedAt }))
  }
}

// The account-wide blocked-address list (spec 2.5). A block's identity is
// (account, addressType, address): the same number may be blocked for whatsapp and not phone.
import { Invalid } from '../platform/errors.js'
import type { Collection, Store } from '../platform/store/index.js'
import type { Clock } from '../platform/clock.js'
import { stableId } from '../platform/ids.js'
import { type Actor, COLLECTIONS } from './collections.js'

export type AddressType = 'phone' | 'email' | 'whatsapp'

export interface BlockedDoc {
  _id: string
  accountId: string
  addressType: AddressType
  /** The normalized address, or erasedAddress() of it once its person was erased. */
  address: string
  reason: string | null
  blockedBy: string
  createdAt: Date
  /** When its person was erased (dialer/erasure.ts): the block stays, without the address. */
  erasedAt?: Date
}

/**
 * What an erased person's block keeps instead of the address (dialer/erasure.ts): a do-not-call
 * block must go on refusing the address, so it stays, keyed by a digest of (account, type,
 * address). Whoever holds the address finds the block again (the scheduler before a dial, an
 * unblock, a listing filtered by address); the block alone no longer says whose it is.
 */
export const erasedAddress = (accountId: string, type: string, normalized: string) => `erased:${stableId(`${accountId}|${type}|${normalized}`)}`

/**
 * The `address` values that hold a block of these addresses (each as typed: its own value and
 * its erased form), and the blockKey() a found block stands for.
 */
export function blockLookup(accountId: string, addresses: { type: string; address: string }[]) {
  const keyOf = new Map<string, string>()
  for (const { type, address } of addresses) {
    const normalized = normalizeAddress(type as AddressType, address)
    keyOf.set(erasedAddress(accountId, type, normalized), `${type}|${normalized}`)
  }
  const values = [...new Set([...addresses.map(a => normalizeAddress(a.type as AddressType, a.address)), ...keyOf.keys()])]
  return { values, keyOf: (doc: { addressType: string; address: string }) => keyOf.get(doc.address) ?? `${doc.addressType}|${doc.address}` }
}

const PHONE = /^[0-9]{7,15}$/
/** RFC 5321's longest address; checked before anything else looks at the text. */
const MAX_ADDRESS_LENGTH = 254

/**
 * local@domain.tld without whitespace: one pass over the text, no regex (the regex it replaces
 * backtracked quadratically on long dotted input).
 */
function isEmail(address: string): boolean {
  if (address.length > MAX_ADDRESS_LENGTH || /\s/.test(address)) return false
  const at = address.indexOf('@')
  if (at <= 0 || address.indexOf('@', at + 1) !== -1) return false
  const domain = address.slice(at + 1)
  const dot = domain.indexOf('.', 1)
  return dot > 0 && dot < domain.length - 1
}

const isValid = (type: AddressType, address: string) => (type === 'email' ? isEmail(address) : address.length <= 15 && PHONE.test(address))

/** Canonical form, so "Ana@X.com" and "ana@x.com" are one block. */
export function normalizeAddress(type: AddressType, address: string): string {
  const trimmed = address.trim()
  return type === 'email' ? trimmed.toLowerCase() : trimmed
}

function addressesOf(body: { address?: string; addresses?: string[] }): string[] {
  const list = body.addresses ?? (body.address !== undefined ? [body.address] : [])
  if (list.length === 0) {
    throw new Invalid('ADDRESS_REQUIRED', 'address or addresses is required: send "address" (one) or "addresses" (a non-empty array)')
  }
  return list
}

function checkFormats(type: AddressType, addresses: string[]) {
  const details = addresses
    .map((address, index) => ({ address, index }))
    .filter(({ address }) => !isValid(type, address))
    .map(({ address, index }) => ({
      index,
      field: `addresses[${index}]`,
      code: type === 'email' ? 'INVALID_EMAIL_FORMAT' : 'INVALID_PHONE_FORMAT',
      reason: type === 'email' ? 'not an e-mail address' : 'digits only, 7 to 15 characters, country code included, no + sign',
      meta: { received: address.length > 254 ? `${address.slice(0, 254)}…` : address },
    }))
  if (details.length > 0) {
    throw new Invalid('VALIDATION_FAILED', `${details.length} address(es) are not valid ${type} addresses; nothing was blocked`, { details })
  }
}

export class BlockedAddresses {
  private readonly docs: Collection<BlockedDoc>
  constructor(store: Store, private readonly clock: Clock) {
    this.docs = store.collection<BlockedDoc>(COLLECTIONS.blocked)
  }

  async block(accountId: string, actor: Actor, body: { address?: string; addresses?: string[]; addressType: AddressType; reason?: string }) {
    const raw = addressesOf(body)
    const type = body.addressType
    const addresses = raw.map(a => normalizeAddress(type, a))
    checkFormats(type, addresses)
    const unique = [...new Set(addresses)]
    const now = new Date(this.clock.now())
    const result = await this.docs.insertMany(
      unique.map(address => ({
        _id: stableId(`${accountId}|${type}|${address}`),
        accountId,
        addressType: type,
        address,
        reason: body.reason ?? null,
        blockedBy: actor.id,
        createdAt: now,
      })),
      { ordered: false },
    )
    // Already-blocked addresses and repeats within the request are skipped, not errors.
    return { blocked: result.insertedCount, skipped: addresses.length - result.insertedCount }
  }

  async unblock(accountId: string, body: { address?: string; addresses?: string[]; addressType: AddressType }) {
    const { values } = blockLookup(accountId, addressesOf(body).map(address => ({ type: body.addressType, address })))
    const unblocked = await this.docs.deleteMany({ accountId, addressType: body.addressType, address: { $in: values } })
    return { unblocked }
  }

  async list(accountId: string, filter: { addressType?: AddressType; address?: string }, limit: number, offset: number) {
    const query: Record<string, unknown> = { accountId }
    if (filter.addressType) query.addressType = filter.addressType
    if (filter.address) {
      const types: AddressType[] = filter.addressType ? [filter.addressType] : ['phone', 'email', 'whatsapp']
      query.address = { $in: blockLookup(accountId, types.map(type => ({ type, address: filter.address! }))).values }
    }
    const [docs, total] = await Promise.all([
      this.docs.find(query, { sort: { createdAt: -1, _id: 1 }, skip: offset, limit }),
      this.docs.countDocuments(query),
    ])
    return {
      data: docs.map(d => ({
        address: d.address,
        addressType: d.addressType,
        reason: d.reason,
        blockedBy: d.blockedBy,
        createdAt: d.createdAt.toISOString(),
        ...(d.erasedAt ? { erasedAt: d.erasedAt.toISOString() } : {}),
      })),
      total,
    }
  }
}

// The account-wide blocked-address list.
import t from 'tap'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'

for (const store of STORES) {
  t.test(`blocked addresses on the ${store} store`, async t => {
    const { base } = await startTestService(t, { store })
    const path = '/dialer/v1/blocked-addresses'

    t.test('block, skip repeats, list, unblock by type', async t => {
      const first = await call(base, 'POST', path, { body: { addresses: ['34600000001', '34600000002', '34600000002'], addressType: 'phone', reason: 'DNC request' } })
      t.equal(first.status, 200)
      t.same(first.json, { blocked: 2, skipped: 1 })
      const again = await call(base, 'POST', path, { body: { address: '34600000001', addressType: 'phone' } })
      t.same(again.json, { blocked: 0, skipped: 1 })
      const whatsapp = await call(base, 'POST', path, { body: { address: '34600000001', addressType: 'whatsapp' } })
      t.same(whatsapp.json, { blocked: 1, skipped: 0 }, 'the type is part of the identity')

      const list = await call(base, 'GET', `${path}?addressType=phone`)
      t.equal(list.status, 200)
      t.equal(list.json.total, 2)
      t.match(list.json.data[0], { addressType: 'phone', reason: 'DNC request' })

      const wrongType = await call(base, 'DELETE', path, { body: { address: '34600000002', addressType: 'whatsapp' } })
      t.same(wrongType.json, { unblocked: 0 }, 'unblock needs the type used at block time')
      const unblock = await call(base, 'DELETE', path, { body: { addresses: ['34600000001', '34600000002'], addressType: 'phone' } })
      t.same(unblock.json, { unblocked: 2 })
      t.equal((await call(base, 'GET', `${path}?addressType=phone`)).json.total, 0)
      t.equal((await call(base, 'GET', `${path}?addressType=whatsapp`)).json.total, 1)
    })

    t.test('e-mail addresses are matched case-insensitively', async t => {
      await call(base, 'POST', path, { body: { address: 'Ana@Example.com', addressType: 'email' } })
      const res = await call(base, 'POST', path, { body: { address: 'ana@example.COM', addressType: 'email' } })
      t.same(res.json, { blocked: 0, skipped: 1 })
    })

    t.test('blocking a long address followed by U+0000 and more does not count as blocking the address itself', async t => {
      const real = `victim${'q'.repeat(64)}@example.com`
      const decoy = await call(base, 'POST', path, { body: { address: `${real}\0x`, addressType: 'email' } })
      t.same(decoy.json, { blocked: 1, skipped: 0 })
      const res = await call(base, 'POST', path, { body: { address: real, addressType: 'email' } })
      t.same(res.json, { blocked: 1, skipped: 0 }, 'the address itself is blocked, not skipped')
      const listed = await call(base, 'GET', `${path}?addressType=email&address=${encodeURIComponent(real)}`)
      t.equal(listed.json.total, 1, 'and listed once')
    })

    t.test('missing address says address or addresses is required', async t => {
      for (const method of ['POST', 'DELETE']) {
        const res = await call(base, method, path, { body: { addressType: 'phone' } })
        t.equal(res.status, 400)
        t.match(res.json.message, /address or addresses is required/)
        t.equal(res.json.code, 'ADDRESS_REQUIRED')
      }
      const empty = await call(base, 'POST', path, { body: { addresses: [], addressType: 'phone' } })
      t.equal(empty.status, 400)
    })

    t.test('invalid addresses and types are rejected whole', async t => {
      const res = await call(base, 'POST', path, { body: { addresses: ['34600000009', '+34600000010'], addressType: 'phone' } })
      t.equal(res.status, 400)
      t.match(res.json.details, [{ index: 1, code: 'INVALID_PHONE_FORMAT' }])
      t.equal((await call(base, 'GET', `${path}?address=34600000009&addressType=phone`)).json.total, 0, 'nothing blocked')
      const type = await call(base, 'POST', path, { body: { address: '34600000009', addressType: 'fax' } })
      t.equal(type.status, 400)
      t.match(type.json.details, [{ field: 'addressType' }])
    })

    t.test('the list belongs to the account', async t => {
      await call(base, 'POST', path, { body: { address: '34611111111', addressType: 'phone' } })
      const theirs = await call(base, 'GET', `${path}?address=34611111111&addressType=phone`, { key: KEYS.globex })
      t.equal(theirs.json.total, 0)
      const unblock = await call(base, 'DELETE', path, { key: KEYS.globex, body: { address: '34611111111', addressType: 'phone' } })
      t.same(unblock.json, { unblocked: 0 })
    })
  })
}

t.test('keys and roles', async t => {
  const { base } = await startTestService(t)
  const noKey = await call(base, 'GET', '/dialer/v1/blocked-addresses', { key: null })
  t.equal(noKey.status, 401)
  t.equal(noKey.json.code, 'UNAUTHORIZED')
  const badKey = await call(base, 'GET', '/dialer/v1/blocked-addresses', { key: 'not-a-real-key-0000000000' })
  t.equal(badKey.status, 401)
  const wrongRole = await call(base, 'GET', '/dialer/v1/blocked-addresses', { key: KEYS.acmeReportsOnly })
  t.equal(wrongRole.status, 403)
  t.equal(wrongRole.json.code, 'FORBIDDEN')
  const dialerOnly = await call(base, 'GET', '/dialer/v1/blocked-addresses', { key: KEYS.acmeDialerOnly })
  t.equal(dialerOnly.status, 200)
})

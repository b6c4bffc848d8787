// The ids the dialer makes are time-ordered UUIDs (version 7; README, Contacts): a later load's
// contacts have greater ids than an earlier load's, generated identifiers are such UUIDs too, and
// batch and operation ids are the same kind. A client that sorts by id gets creation order.
import t from 'tap'
import { call, STORES, startTestService } from '../support/harness.js'
import { contact, createBatch, load } from '../support/dialer.js'
import { isUuid } from '../../platform/ids.js'

const version = (id: string) => id[14]

for (const store of STORES) {
  t.test(`${store}: batches, operations, contacts and generated identifiers get version 7 UUIDs in creation order`, async t => {
    const { base } = await startTestService(t, { store })
    const batchId = await createBatch(base)
    t.ok(isUuid(batchId) && version(batchId) === '7', `batch id ${batchId}`)

    const first = await load(base, batchId, { contacts: [contact(1), contact(2), contact(3)] })
    await new Promise(resolve => setTimeout(resolve, 5)) // the next load starts in a later millisecond
    const { name, addresses } = contact(4)
    const second = await load(base, batchId, { contacts: [{ name, addresses }] }) // no identifier: one is generated
    for (const op of [first, second]) t.ok(isUuid(op.operationId) && version(op.operationId) === '7', `operation id ${op.operationId}`)

    const listed = (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=10`)).json.data as { contactId: string; identifier: string; identifierGenerated: boolean }[]
    t.equal(listed.length, 4)
    for (const c of listed) t.ok(isUuid(c.contactId) && version(c.contactId) === '7', `contact id ${c.contactId}`)
    const generated = listed.find(c => c.identifierGenerated)!
    t.ok(isUuid(generated.identifier) && version(generated.identifier) === '7', `generated identifier ${generated.identifier}`)
    const earlier = listed.filter(c => !c.identifierGenerated).map(c => c.contactId)
    t.ok(earlier.every(id => id < generated.contactId), 'the later load sorts after the earlier one')
  })
}

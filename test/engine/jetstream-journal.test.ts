// The session journal on a real nats-server (engine/cluster/jetstream-journal.ts): appends in
// order, a restore reads from the latest checkpoint on, a node taking the session over fences the
// previous owner out, and an append whose answer was lost is settled without a duplicate.
import t from 'tap'
import { connect } from '@nats-io/transport-node'
import { jetstreamManager } from '@nats-io/jetstream'
import { JetStreamJournal, JournalFenced, JOURNAL_STREAM, journalSubject, type JournalRecord } from '../../engine/cluster/jetstream-journal.js'
import { entriesOf } from '../../engine/cluster/journaled-session-store.js'
import type { CheckpointWrite } from '../../engine/persistence/session-store.js'
import type { HistoryEntry } from '../../engine/types.js'
import { createLogger } from '../../platform/logger.js'
import { Wire } from '../../platform/wire.js'
import { startNatsServer } from '../support/nats-server.js'

const logger = createLogger('silent')
const entry = (seq: number): HistoryEntry => ({ seq, type: 'message.user', at: 1000 + seq, text: `m${seq}` }) as HistoryEntry
const batch = (epoch: number, ...seqs: number[]): JournalRecord => ({ kind: 'batch', entries: seqs.map(entry), epoch })
const write = (logPosition: number): CheckpointWrite => ({
  state: 'active',
  agentId: 'a',
  checkpoint: JSON.stringify({ logPosition }),
  logPosition,
  eventSeq: 3,
  deadlines: { idle: 0, tools: [] },
  updatedAt: 0,
})
const checkpoint = (epoch: number, logPosition: number) =>
  ({ kind: 'checkpoint', session: { accountId: 'acme', crewId: 'demo', consumers: ['c1'], createdAt: 1 }, write: write(logPosition), epoch }) as const
const seqsOf = (records: { record: JournalRecord }[]) => records.flatMap(r => (r.record.kind === 'batch' ? r.record.entries.map(e => e.seq) : []))

t.test('appends, checkpoints and reads from the latest checkpoint on', async t => {
  const nats = await startNatsServer(t)
  const nc = await connect({ servers: nats.url })
  t.teardown(() => nc.close())
  const journal = await JetStreamJournal.open(nc, { replicas: 1, retentionMs: 3_600_000, logger, wire: new Wire({ logger }) })
  journal.begin('s1', 7)
  await journal.append('s1', checkpoint(7, 0))
  await Promise.all([journal.append('s1', batch(7, 1, 2)), journal.append('s1', batch(7, 3)), journal.append('s1', { kind: 'consumer', consumerId: 'c2', epoch: 7 })])
  let read = await journal.read('s1')
  t.same(read.records.map(r => r.record.kind), ['checkpoint', 'batch', 'batch', 'consumer'], 'every record, in the order appended')
  t.same(seqsOf(read.records), [1, 2, 3])
  t.equal(read.lastSeq, read.records.at(-1)!.seq)

  await journal.checkpoint('s1', checkpoint(7, 3))
  await journal.append('s1', batch(7, 4))
  await new Promise(r => setTimeout(r, 100)) // the pointer is a plain publish
  read = await journal.read('s1')
  t.same(read.records.map(r => r.record.kind), ['checkpoint', 'batch'], 'a restore reads from the latest checkpoint on')
  t.same(seqsOf(read.records), [4])
  t.same(seqsOf((await journal.readAll('s1')).records), [1, 2, 3, 4], 'the whole log is still kept')

  await journal.remove('s1')
  t.same((await journal.readAll('s1')).records, [], 'an ended session leaves nothing')
  await t.rejects(journal.append('s1', batch(7, 5)), JournalFenced, 'nor does its node append any more')
})

t.test('a node taking the session over fences the previous owner out', async t => {
  const nats = await startNatsServer(t)
  const [a, b] = await Promise.all([connect({ servers: nats.url }), connect({ servers: nats.url })])
  t.teardown(() => Promise.all([a.close(), b.close()]))
  const wire = new Wire({ logger })
  const first = await JetStreamJournal.open(a, { replicas: 1, retentionMs: 3_600_000, logger, wire })
  const second = await JetStreamJournal.open(b, { replicas: 1, retentionMs: 3_600_000, logger, wire })
  first.begin('s2', 1)
  await first.append('s2', checkpoint(1, 0))
  await first.append('s2', batch(1, 1))

  const read = await second.takeOver('s2', 2)
  t.same(seqsOf(read.records), [1], 'the new owner reads what the old one stored')
  await t.rejects(first.append('s2', batch(1, 2)), JournalFenced, "the old owner's next append is refused")
  t.notOk(first.holds('s2'), 'and it lets the session go')
  await second.append('s2', batch(2, 2))
  const after = await second.readAll('s2')
  t.same(after.records.map(r => r.record.kind), ['checkpoint', 'batch', 'owner', 'batch'])
  t.same(seqsOf(after.records), [1, 2], "nothing of the fenced owner's in the log")
})

t.test('an append whose acknowledgement was lost: the retry goes on after it, each entry restored once', async t => {
  const nats = await startNatsServer(t)
  const nc = await connect({ servers: nats.url })
  t.teardown(() => nc.close())
  const journal = await JetStreamJournal.open(nc, { replicas: 1, retentionMs: 3_600_000, logger, wire: new Wire({ logger }), attempts: 1 })
  journal.begin('s3', 4)
  await journal.append('s3', checkpoint(4, 0))
  // The record lands, but this node never hears so: the stream's answer is lost in flight.
  const jsm = await jetstreamManager(nc)
  const requests = (journal as any).requests
  const original = requests.publish.bind(requests)
  let lose = true
  requests.publish = async (...args: unknown[]) => {
    const ack = await original(...args)
    if (lose) {
      lose = false
      throw new Error('timeout')
    }
    return ack
  }
  await t.rejects(journal.append('s3', batch(4, 1)), /timeout/, 'the writer sees a failure')
  // The writer retries with its entries again (and newer ones): the node reads where the log ends first.
  await journal.append('s3', batch(4, 1, 2))
  const read = await journal.readAll('s3')
  t.same(read.records.map(r => r.record.kind), ['checkpoint', 'batch', 'batch'])
  t.same(seqsOf(read.records), [1, 1, 2], 'the retried entry is in the log twice...')
  t.same(entriesOf(read.records, 0).map(e => e.seq), [1, 2], '...and restored once')
  const info = await jsm.streams.info(JOURNAL_STREAM, { subjects_filter: journalSubject('s3') })
  t.equal(info.state.messages, 3)
})

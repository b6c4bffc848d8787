// NatsBlobStore against a real nats-server (JetStream on): the BlobStore semantics FileBlobStore
// has (write streamed in chunks and visible only once complete, a failed write leaves nothing,
// read/size/remove/list), plus what only a remote store has: a reader holds a bounded read-ahead,
// not the file, and NATS being away is a 503 DomainError on every call, never a crash or a hang.
import t from 'tap'
import { randomBytes } from 'node:crypto'
import type { Readable } from 'node:stream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { jetstreamManager } from '@nats-io/jetstream'
import { NatsBlobStore, UPLOADS_BUCKET, UPLOADS_MAX_AGE_MS } from '../../platform/blobs-nats.js'
import { startNatsServer, type NatsTestServer } from '../support/nats-server.js'

const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))
const CHUNK = 128 * 1024

let nats: NatsTestServer
t.before(async () => {
  nats = await startNatsServer(t)
})

async function connection(t: { teardown(fn: () => unknown): void }, url = nats.url): Promise<NatsConnection> {
  const nc = await connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 100 })
  t.teardown(() => nc.close())
  return nc
}

let bucketSeq = 0
const bucketName = (label: string) => `test_${label}_${++bucketSeq}`

/** The bytes in pieces of odd sizes (none a multiple of the object store's chunk). */
async function* pieces(bytes: Buffer, size = 50_001) {
  for (let at = 0; at < bytes.length; at += size) {
    await sleep(0)
    yield bytes.subarray(at, at + size)
  }
}

async function readAll(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = []
  for await (const part of stream) parts.push(part as Buffer)
  return Buffer.concat(parts)
}

async function streamMessages(nc: NatsConnection, bucket: string) {
  const jsm = await jetstreamManager(nc)
  return (await jsm.streams.info(`OBJ_${bucket}`)).state.messages
}

t.test('a blob written in pieces reads back identical; size, list and the bucket settings', async t => {
  const nc = await connection(t)
  const store = new NatsBlobStore(nc) // the production bucket and settings
  const bytes = randomBytes(3 * CHUNK + 12_345)
  t.equal(await store.write('csv_roundtrip', pieces(bytes)), bytes.length, 'write answers the size')
  t.ok((await readAll(store.read('csv_roundtrip'))).equals(bytes), 'the same bytes come back')
  t.equal(await store.size('csv_roundtrip'), bytes.length)
  t.equal(await store.size('csv_never_written'), null, 'no such blob: null')

  t.equal(await store.write('csv_empty', pieces(Buffer.alloc(0))), 0, 'an empty blob')
  t.equal((await readAll(store.read('csv_empty'))).length, 0)
  t.equal(await store.size('csv_empty'), 0)

  const listed = await store.list(100)
  t.same(listed.map(e => e.key).sort(), ['csv_empty', 'csv_roundtrip'])
  for (const entry of listed) t.ok(Math.abs(entry.modifiedAt - Date.now()) < 10_000, `${entry.key}: modifiedAt is the write time`)
  t.equal((await store.list(1)).length, 1, 'list stops at its limit')

  const info = await (await jetstreamManager(nc)).streams.info(`OBJ_${UPLOADS_BUCKET}`)
  t.equal(info.config.storage, 'file')
  t.equal(info.config.num_replicas, 1)
  t.equal(info.config.max_age, UPLOADS_MAX_AGE_MS * 1_000_000, 'max age 48 h (nanoseconds)')

  // Written again under the same key: the new bytes replace the old ones at once.
  const again = randomBytes(CHUNK + 1)
  await store.write('csv_roundtrip', pieces(again))
  t.ok((await readAll(store.read('csv_roundtrip'))).equals(again), 'a rewrite replaces the blob')
  await store.remove('csv_roundtrip')
  await store.remove('csv_empty')
})

t.test('a blob is not visible while it is being written', async t => {
  const nc = await connection(t)
  const store = new NatsBlobStore(nc, { bucket: bucketName('partial') })
  let release!: () => void
  const gate = new Promise<void>(resolve => (release = resolve))
  let sent = 0
  async function* slow() {
    yield randomBytes(2 * CHUNK + 7)
    sent++
    await gate
    yield randomBytes(100)
  }
  const writing = store.write('csv_slow', slow())
  while (sent === 0) await sleep(10)
  await sleep(200) // the first chunks are published by now
  t.equal(await store.size('csv_slow'), null, 'no size while being written')
  t.same(await store.list(10), [], 'not listed while being written')
  const early = await readAll(store.read('csv_slow')).catch(error => error)
  t.match(early, { code: 'ENOENT' }, 'read: no such blob yet')
  release()
  t.equal(await writing, 2 * CHUNK + 107)
  t.equal(await store.size('csv_slow'), 2 * CHUNK + 107, 'there once complete')
  t.same((await store.list(10)).map(e => e.key), ['csv_slow'])
})

t.test('a failed write leaves nothing, and fails with the body\'s own error', async t => {
  const nc = await connection(t)
  const bucket = bucketName('failed')
  const store = new NatsBlobStore(nc, { bucket })
  await store.write('csv_other', pieces(randomBytes(1000)))
  const before = await streamMessages(nc, bucket)
  let returned = false
  async function* broken() {
    try {
      yield randomBytes(3 * CHUNK)
      throw Object.assign(new Error('body too large'), { code: 'PAYLOAD_TOO_LARGE' })
    } finally {
      returned = true
    }
  }
  const error = await store.write('csv_broken', broken()).catch(e => e)
  t.match(error, { message: 'body too large', code: 'PAYLOAD_TOO_LARGE' }, 'the body\'s error, not wrapped')
  t.ok(returned, 'the body was let go')
  t.equal(await store.size('csv_broken'), null)
  t.same((await store.list(10)).map(e => e.key), ['csv_other'], 'not listed')
  t.equal(await streamMessages(nc, bucket), before, 'the chunks it had published are purged')
})

t.test('remove', async t => {
  const nc = await connection(t)
  const store = new NatsBlobStore(nc, { bucket: bucketName('remove') })
  await store.write('csv_a', pieces(randomBytes(CHUNK * 2)))
  await store.write('csv_b', pieces(randomBytes(10)))
  await store.remove('csv_a')
  t.equal(await store.size('csv_a'), null)
  t.match(await readAll(store.read('csv_a')).catch(e => e), { code: 'ENOENT' })
  t.same((await store.list(10)).map(e => e.key), ['csv_b'])
  await store.remove('csv_a') // again: nothing to do
  await store.remove('csv_never')
  t.equal(await store.size('csv_b'), 10, 'the other blob stays')
  t.throws(() => store.read('../etc/passwd'), /invalid blob key/)
  await t.rejects(store.remove('a/b'), /invalid blob key/)
})

t.test('a reader holds a bounded read-ahead, not the file; removed mid-read is an error', async t => {
  const nc = await connection(t)
  const store = new NatsBlobStore(nc, { bucket: bucketName('bounded') })
  const bytes = randomBytes(40 * CHUNK) // 5 MiB
  await store.write('csv_big', pieces(bytes, 1 << 20))
  const reader = store.read('csv_big')
  reader.read(0) // start filling, then read nothing
  await sleep(500)
  t.ok(reader.readableLength <= 3 * CHUNK, `buffered ${reader.readableLength} bytes of ${bytes.length}`)
  t.ok(reader.readableLength > 0, 'it did read ahead')
  reader.destroy()

  const partial = store.read('csv_big')
  const first = await new Promise<Buffer>(resolve => partial.once('data', resolve))
  partial.pause()
  t.ok(first.equals(bytes.subarray(0, CHUNK)), 'the first chunk')
  await store.remove('csv_big')
  partial.resume()
  const error = await readAll(partial).catch(e => e)
  t.match(error, { message: /removed or replaced while being read/ })
})

t.test('NATS away: every call is a 503 UPLOAD_STORAGE_UNAVAILABLE, nothing hangs', async t => {
  const own = await startNatsServer(t)
  const nc = await connection(t, own.url)
  const store = new NatsBlobStore(nc, { bucket: bucketName('away'), timeoutMs: 1000 })
  const bytes = randomBytes(20 * CHUNK)
  await store.write('csv_kept', pieces(bytes))

  // Cut while a reader is part way through.
  const reader = store.read('csv_kept')
  await new Promise(resolve => reader.once('data', resolve))
  reader.pause()
  await own.stop()
  reader.resume()
  const midRead = await readAll(reader).catch(e => e)
  t.match(midRead, { code: 'UPLOAD_STORAGE_UNAVAILABLE', kind: 'unavailable' }, 'a read cut mid-way ends with an error')

  const unavailable = { code: 'UPLOAD_STORAGE_UNAVAILABLE', kind: 'unavailable' }
  t.match(await store.size('csv_kept').catch(e => e), unavailable, 'size')
  t.match(await store.list(10).catch(e => e), unavailable, 'list')
  t.match(await store.remove('csv_kept').catch(e => e), unavailable, 'remove')
  t.match(await readAll(store.read('csv_kept')).catch(e => e), unavailable, 'read')
  t.match(await store.write('csv_new', pieces(randomBytes(CHUNK * 2))).catch(e => e), unavailable, 'write')
  // A store that never reached its bucket fails the same way (and tries again next time).
  const fresh = new NatsBlobStore(nc, { bucket: bucketName('never'), timeoutMs: 1000 })
  t.match(await fresh.size('csv_x').catch(e => e), unavailable, 'a bucket never opened')
})

t.test('NATS back after a restart: the blobs are there', async t => {
  const own = await startNatsServer(t)
  const nc = await connection(t, own.url)
  const store = new NatsBlobStore(nc, { bucket: bucketName('restart'), timeoutMs: 1000 })
  const bytes = randomBytes(3 * CHUNK)
  await store.write('csv_kept', pieces(bytes))
  await own.restart()
  const deadline = Date.now() + 15_000
  let size: number | null | Error = null
  while (Date.now() < deadline) {
    size = await store.size('csv_kept').catch(e => e)
    if (typeof size === 'number') break
    await sleep(200)
  }
  t.equal(size, bytes.length, 'size once reconnected')
  t.ok((await readAll(store.read('csv_kept'))).equals(bytes), 'the same bytes')
})

t.test('two processes opening the bucket at once both use it', async t => {
  const bucket = bucketName('race')
  const [a, b] = [new NatsBlobStore(await connection(t), { bucket }), new NatsBlobStore(await connection(t), { bucket })]
  await Promise.all([a.write('csv_a', pieces(randomBytes(10))), b.write('csv_b', pieces(randomBytes(20)))])
  t.same([await a.size('csv_b'), await b.size('csv_a')], [20, 10], 'each sees what the other wrote')
})

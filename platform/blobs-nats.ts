// Uploaded files in a JetStream object store, for a scale-out deployment (NATS_URL set): a CSV
// uploaded through any gateway is read by whichever worker imports it, and DATA_DIR stays local
// to each process.
//
// One bucket (`sb_uploads`, stream `OBJ_sb_uploads`, file storage, NATS_STREAM_REPLICAS), created
// by the first process that needs it; an existing bucket is used as it is (an operator may change
// its replicas or limits with the `nats` CLI). An object is a run of chunk messages (128 KiB each)
// under `$O.sb_uploads.C.<nuid>` and one meta message naming them, written last:
//   - write: streams the chunks, each published and acknowledged before the next is read from the
//     body; the blob exists once the meta message is stored. A failed write purges the chunks it
//     published, so it leaves nothing; one cut short by a dying process leaves chunks no meta
//     names (invisible, never listed), removed by the bucket's max age.
//   - read: one chunk per request (STREAM.MSG.GET next_by_subj, answered by the stream's leader),
//     asked for only when the reader wants more, so a slow import never holds the file in memory
//     (the library's get() pushes every chunk at once); the SHA-256 digest is checked at the end.
//   - the bucket's max age (48 h, twice the upload retention) is a safety net: the import deletes
//     a file once every row is queued, and the sweep deletes files nobody can import any more.
// A NATS failure (unreachable, timeout) is a DomainError `503 UPLOAD_STORAGE_UNAVAILABLE`.
import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import { nanos, type NatsConnection } from '@nats-io/transport-node'
import { jetstream, jetstreamManager, StorageType, type JetStreamManager } from '@nats-io/jetstream'
import { Objm, type ObjectInfo, type ObjectStore } from '@nats-io/obj'
import { SAFE_KEY, type BlobStore } from './blobs.js'
import { DomainError, Unavailable } from './errors.js'

export const UPLOADS_BUCKET = 'sb_uploads'
/** The bucket's max age: twice the 24 h an upload may wait for its import. */
export const UPLOADS_MAX_AGE_MS = 48 * 60 * 60 * 1000
/** Bytes a reader fetches ahead of what it was asked for (about two chunks). */
const READ_AHEAD_BYTES = 256 * 1024

export interface NatsBlobStoreOptions {
  bucket?: string
  /** Replicas of the bucket's stream when this process creates it (3 on a NATS cluster). */
  replicas?: number
  /** Max age of the bucket's messages when this process creates it (0: none). */
  maxAgeMs?: number
  /** Timeout of each JetStream request (a chunk's publish or read, a lookup). */
  timeoutMs?: number
}

interface Bucket {
  objects: ObjectStore
  jsm: JetStreamManager
  stream: string
}

const unavailable = (error: unknown) =>
  error instanceof DomainError
    ? error
    : Object.assign(new Unavailable('UPLOAD_STORAGE_UNAVAILABLE', 'The upload storage cannot be reached; try again'), { cause: error })

function checkKey(key: string) {
  if (!SAFE_KEY.test(key)) throw new Error('invalid blob key')
}

export class NatsBlobStore implements BlobStore {
  private readonly bucketName: string
  private readonly options: Required<Omit<NatsBlobStoreOptions, 'bucket'>>
  private bucketReady?: Promise<Bucket>

  constructor(
    private readonly nc: NatsConnection,
    options: NatsBlobStoreOptions = {},
  ) {
    this.bucketName = options.bucket ?? UPLOADS_BUCKET
    this.options = { replicas: options.replicas ?? 1, maxAgeMs: options.maxAgeMs ?? UPLOADS_MAX_AGE_MS, timeoutMs: options.timeoutMs ?? 5000 }
  }

  /** Opens the bucket, creating it unless it exists; a failure is retried by the next call. */
  private bucket(): Promise<Bucket> {
    this.bucketReady ??= (async () => {
      const js = jetstream(this.nc, { timeout: this.options.timeoutMs })
      const jsm = await jetstreamManager(this.nc, { timeout: this.options.timeoutMs })
      const objm = new Objm(js)
      let objects: ObjectStore
      try {
        objects = await objm.create(this.bucketName, {
          storage: StorageType.File,
          replicas: this.options.replicas,
          ...(this.options.maxAgeMs > 0 ? { ttl: nanos(this.options.maxAgeMs) } : {}),
        })
      } catch (error) {
        // Created at the same moment by another process (with other settings): use that one.
        try {
          objects = await objm.open(this.bucketName)
        } catch {
          throw error
        }
      }
      return { objects, jsm, stream: `OBJ_${this.bucketName}` }
    })().catch(error => {
      this.bucketReady = undefined
      throw error
    })
    return this.bucketReady
  }

  /** The object's current meta, or null when there is none (never written, or deleted). */
  private async info(key: string): Promise<ObjectInfo | null> {
    try {
      const info = await (await this.bucket()).objects.info(key)
      return info && !info.deleted ? info : null
    } catch (error) {
      throw unavailable(error)
    }
  }

  async write(key: string, chunks: AsyncIterable<Buffer>): Promise<number> {
    checkKey(key)
    const source = chunks[Symbol.asyncIterator]()
    let sourceFailed = false
    let sourceDone = false
    // Pulled by the object store one read at a time: the next body chunk is asked for only once
    // the previous one is published.
    const body = new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          let next: IteratorResult<Buffer>
          try {
            next = await source.next()
          } catch (error) {
            sourceFailed = sourceDone = true
            throw error
          }
          if (next.done) {
            sourceDone = true
            controller.close()
          } else {
            controller.enqueue(next.value)
          }
        },
      },
      { highWaterMark: 0 },
    )
    try {
      const { objects } = await this.bucket()
      const info = await objects.put({ name: key }, body, { timeout: this.options.timeoutMs })
      return info.size
    } catch (error) {
      if (sourceFailed) throw error // the body's own error (too large, client gone) as it is
      throw unavailable(error)
    } finally {
      // The store gave up before the body ended: let the body's producer go.
      if (!sourceDone) await source.return?.().catch(() => {})
    }
  }

  read(key: string): Readable {
    checkKey(key)
    return Readable.from(this.chunks(key), { objectMode: false, highWaterMark: READ_AHEAD_BYTES })
  }

  private async *chunks(key: string): AsyncGenerator<Buffer> {
    const info = await this.info(key)
    if (!info) throw Object.assign(new Error(`no blob ${key}`), { code: 'ENOENT' })
    if (info.options?.link) throw new Error(`blob ${key} is a link`)
    const { jsm, stream } = await this.bucket()
    const subject = `$O.${this.bucketName}.C.${info.nuid}`
    const hash = createHash('sha256')
    let seq = 0
    let size = 0
    for (let chunk = 0; chunk < info.chunks; chunk++) {
      let message
      try {
        // next_by_subj is not in the client's types; nats-server answers it since 2.9.
        message = await jsm.streams.getMessage(stream, { seq: seq + 1, next_by_subj: subject } as unknown as { seq: number })
      } catch (error) {
        throw unavailable(error)
      }
      if (!message) throw new Error(`blob ${key} was removed or replaced while being read`)
      seq = message.seq
      size += message.data.length
      hash.update(message.data)
      yield Buffer.from(message.data.buffer, message.data.byteOffset, message.data.byteLength)
    }
    const expected = Buffer.from(info.digest.replace(/^SHA-256=/, ''), 'base64')
    if (size !== info.size || !hash.digest().equals(expected)) throw new Error(`blob ${key} is corrupt (size or digest differs)`)
  }

  async size(key: string): Promise<number | null> {
    checkKey(key)
    return (await this.info(key))?.size ?? null
  }

  async remove(key: string): Promise<void> {
    checkKey(key)
    try {
      const { objects } = await this.bucket()
      // A deleted object leaves a small marker (its meta, deleted: true) until the max age.
      if (await this.info(key)) await objects.delete(key)
    } catch (error) {
      throw unavailable(error)
    }
  }

  async list(limit: number): Promise<Array<{ key: string; modifiedAt: number }>> {
    let objects: ObjectInfo[]
    try {
      const bucket = await this.bucket()
      // Reads every object's meta (a few hundred bytes each; the max age bounds how many there are).
      objects = await withDeadline(bucket.objects.list(), 30_000)
    } catch (error) {
      throw unavailable(error)
    }
    const found: Array<{ key: string; modifiedAt: number }> = []
    for (const object of objects) {
      if (object.deleted || !SAFE_KEY.test(object.name)) continue
      found.push({ key: object.name, modifiedAt: Date.parse(object.mtime) })
      if (found.length >= limit) break
    }
    return found
  }
}

/** The promise, or a rejection once `ms` passed (a listing must never hang the sweep). */
function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms)
  })
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer))
}

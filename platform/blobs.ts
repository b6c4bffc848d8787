// Uploaded files (CSV imports). One process (no NATS_URL): files under DATA_DIR/uploads. With
// NATS the composition root picks the JetStream object store (blobs-nats.ts) instead, which every
// gateway and worker reads: DATA_DIR then stays local to each process (docs/deploy.md).
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, opendir, rename, rm, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import { Readable } from 'node:stream'

export interface BlobStore {
  /** Streams the chunks to storage; the blob appears only once complete. Returns its size. */
  write(key: string, chunks: AsyncIterable<Buffer>): Promise<number>
  /** The blob's bytes; a missing blob or a storage failure is an 'error' on the stream. */
  read(key: string): Readable
  /** null when there is no such blob. */
  size(key: string): Promise<number | null>
  remove(key: string): Promise<void>
  /** Up to `limit` stored keys with their last write time (partial writes included where they show). */
  list(limit: number): Promise<Array<{ key: string; modifiedAt: number }>>
}

export const SAFE_KEY = /^[A-Za-z0-9_-]{1,100}$/

export class FileBlobStore implements BlobStore {
  private readonly dir: string
  constructor(dataDir: string) {
    this.dir = join(dataDir, 'uploads')
  }

  private path(key: string) {
    if (!SAFE_KEY.test(key)) throw new Error('invalid blob key')
    return join(this.dir, key)
  }

  async write(key: string, chunks: AsyncIterable<Buffer>) {
    await mkdir(this.dir, { recursive: true })
    const final = this.path(key)
    const partial = `${final}.partial`
    try {
      await pipeline(Readable.from(chunks), createWriteStream(partial))
    } catch (error) {
      await rm(partial, { force: true })
      throw error
    }
    await rename(partial, final)
    return (await stat(final)).size
  }

  read(key: string) {
    return createReadStream(this.path(key))
  }

  async size(key: string) {
    try {
      return (await stat(this.path(key))).size
    } catch {
      return null
    }
  }

  async remove(key: string) {
    await rm(this.path(key), { force: true })
    await rm(`${this.path(key)}.partial`, { force: true })
  }

  async list(limit: number) {
    const found: Array<{ key: string; modifiedAt: number }> = []
    let dir
    try {
      dir = await opendir(this.dir)
    } catch {
      return found // nothing uploaded yet
    }
    for await (const entry of dir) {
      const key = entry.name.replace(/\.partial$/, '')
      if (!entry.isFile() || !SAFE_KEY.test(key)) continue
      const info = await stat(join(this.dir, entry.name)).catch(() => null)
      if (info) found.push({ key, modifiedAt: info.mtimeMs })
      if (found.length >= limit) break
    }
    return found
  }
}

// CSV import: a signed, expiring upload URL (no apikey needed to PUT), the uploaded file kept
// in the blob store, and a background import that streams the file through csv-parse, maps
// columns to contacts, validates each row and feeds the same chunk pipeline as API loads.
// Nothing holds the whole file in memory.
import { createHmac, timingSafeEqual } from 'node:crypto'
import { pipeline, type Readable } from 'node:stream'
import { parse, type Options as CsvOptions } from 'csv-parse'
import { Invalid, Forbidden, NotFound, InvalidState, Unsupported, LimitReached } from '../platform/errors.js'
import type { Principal } from '../platform/principal.js'
import type { Platform } from '../platform/index.js'
import type { BlobStore } from '../platform/blobs.js'
import type { Delivery, WorkQueue } from '../platform/bus/index.js'
import type { Collection } from '../platform/store/index.js'
import { newId, stableId } from '../platform/ids.js'
import { COLLECTIONS } from './collections.js'
import { contactIssues, type ContactInput } from './contact-input.js'
import type { Batches, BatchDoc } from './batches.js'
import type { OperationError, Operations } from './operations.js'
import type { ContactLoads, QueuedContact } from './loads.js'
import { queuedContacts } from './load-chunks.js'
import { listenerOrigin } from '../platform/config.js'
import type { QueueWorker } from './queue-workers.js'

export const IMPORT_QUEUE = 'dialer.csv.imports'
const URL_TTL_MS = 60 * 60 * 1000
/** An uploaded file may be turned into a batch for this long after the upload URL was issued. */
const UPLOAD_RETENTION_MS = 24 * 60 * 60 * 1000
const MAX_STORED_ROW_ERRORS = 10_000
/**
 * Longest CSV record (bytes) the parser buffers: without it one line of a 1 GiB upload is held
 * whole in memory (and past V8's string limit, the process runs out of heap). A contact row with
 * 100 customFields of 2,000 characters fits in a quarter of it.
 */
export const MAX_CSV_RECORD_BYTES = 1024 * 1024
const recordTooLarge = (error: unknown) => (error as { code?: string } | null)?.code === 'CSV_MAX_RECORD_SIZE'
/** Files looked at per sweep tick: the sweep never walks a large upload folder in one go. */
const SWEEP_BATCH = 200

/**
 * The blob parsed as CSV. Through pipeline, not pipe: an error of the blob's stream (a file gone,
 * the object store unreachable) then ends the parse with that error instead of leaving it waiting
 * forever, and a parse ended early (header read, a failed chunk) closes the blob's stream.
 */
function parseBlob(source: Readable, options: CsvOptions) {
  return pipeline(source, parse(options), () => {}) // its error reaches whoever iterates the parser
}

export interface ColumnMapping {
  identifier?: string
  name: string
  phone?: string[]
  email?: string[]
  whatsapp?: string[]
  scheduledAt?: string
  contactPriority?: string
  customFields?: string[]
}

interface UploadDoc {
  _id: string
  accountId: string
  fileName: string
  state: 'awaiting' | 'uploaded' | 'consumed'
  size: number | null
  urlExpiresAt: Date
  expiresAt: Date
}

interface ImportErrorDoc {
  _id: string
  batchId: string
  row: number
  identifier: string | null
  field: string
  code: string
  reason: string
}

interface ImportMessage {
  batchId: string
  operationId: string
  tempCsvKey: string
  columnMapping: ColumnMapping
}

/** Maps one CSV record to a contact; address priority follows phone, whatsapp, email column order. */
export function mapRow(record: Record<string, string>, mapping: ColumnMapping): ContactInput {
  const cell = (column?: string) => (column ? (record[column] ?? '').trim() : '')
  const addresses: ContactInput['addresses'] = []
  for (const type of ['phone', 'whatsapp', 'email'] as const) {
    for (const column of mapping[type] ?? []) {
      const address = cell(column)
      if (address) addresses.push({ address, type, priority: addresses.length + 1 })
    }
  }
  const contact: ContactInput = { name: cell(mapping.name), addresses }
  if (cell(mapping.identifier)) contact.identifier = cell(mapping.identifier)
  if (cell(mapping.scheduledAt)) contact.scheduledAt = cell(mapping.scheduledAt)
  const priority = cell(mapping.contactPriority)
  if (priority) contact.contactPriority = /^-?\d+$/.test(priority) ? Number(priority) : (priority as unknown as number)
  if (mapping.customFields?.length) {
    contact.customFields = Object.fromEntries(mapping.customFields.map(column => [column, cell(column)]))
  }
  return contact
}

export class CsvImports {
  private readonly uploads: Collection<UploadDoc>
  private readonly rowErrors: Collection<ImportErrorDoc>
  readonly queue: WorkQueue<ImportMessage>
  readonly worker: QueueWorker<ImportMessage>
  /** Where this process's listener answers (the configured port until `listening` says which). */
  private listener: string

  constructor(
    private readonly platform: Platform,
    private readonly blobs: BlobStore,
    private readonly batches: Batches,
    private readonly operations: Operations,
    private readonly loads: ContactLoads,
  ) {
    this.uploads = platform.store.collection<UploadDoc>(COLLECTIONS.uploads)
    this.rowErrors = platform.store.collection<ImportErrorDoc>(COLLECTIONS.importErrors)
    this.queue = platform.bus.queue<ImportMessage>(IMPORT_QUEUE, { message: 'queue.dialer.import' })
    this.worker = { queue: this.queue, handle: d => this.run(d), options: { concurrency: 1, maxDeliveries: 3 } }
    this.listener = listenerOrigin(platform.config.host, platform.config.port)
  }

  /** The port the gateway is bound to (PORT=0 picks one when it listens). */
  listening(port: number) {
    this.listener = listenerOrigin(this.platform.config.host, port)
  }

  private sign(key: string, expires: number) {
    return createHmac('sha256', this.platform.config.dialer.uploadSigningSecret).update(`${key}.${expires}`).digest('base64url')
  }

  async createUploadUrl(principal: Principal, fileName: string) {
    const now = this.platform.clock.now()
    // Files an account holds that no batch has taken yet: unexpired URLs and uploaded files.
    const limit = this.platform.config.dialer.maxOpenUploadsPerAccount
    const held = (
      await this.uploads.find(
        { accountId: principal.accountId, state: { $in: ['awaiting', 'uploaded'] }, expiresAt: { $gt: new Date(now) } },
        { projection: { state: 1, urlExpiresAt: 1, expiresAt: 1 } },
      )
    ).filter(u => u.state === 'uploaded' || u.urlExpiresAt.getTime() > now)
    if (held.length >= limit) {
      const frees = Math.min(...held.map(u => (u.state === 'awaiting' ? u.urlExpiresAt : u.expiresAt).getTime()))
      throw new LimitReached('UPLOAD_LIMIT_EXCEEDED', `This account holds ${held.length} upload URLs or files no batch has imported (limit ${limit}); import or let them expire`, {}, {
        retryAfterSeconds: Math.max(1, Math.ceil((frees - now) / 1000)),
      })
    }
    const tempCsvKey = `csv_${newId().replace(/-/g, '')}`
    const urlExpiresAt = now + URL_TTL_MS
    const expires = Math.floor(urlExpiresAt / 1000)
    await this.uploads.insertOne({
      _id: tempCsvKey,
      accountId: principal.accountId,
      fileName,
      state: 'awaiting',
      size: null,
      urlExpiresAt: new Date(urlExpiresAt),
      expiresAt: new Date(now + UPLOAD_RETENTION_MS),
    })
    // Never the request's Host (or X-Forwarded-Host): the client writes those, and whoever can
    // make a victim's request carry one would receive the CSV the victim uploads.
    const root = this.platform.config.publicBaseUrl ?? this.listener
    const uploadUrl = `${root}/dialer/v1/uploads/${tempCsvKey}?expires=${expires}&signature=${this.sign(tempCsvKey, expires)}`
    return { uploadUrl, tempCsvKey, method: 'PUT', headers: { 'Content-Type': 'text/csv' }, expiresAt: new Date(expires * 1000).toISOString() }
  }

  /** PUT to the signed URL: checks signature and expiry, then streams the body to storage. */
  async receive(key: string, query: URLSearchParams, contentType: string | undefined, body: AsyncIterable<Buffer>) {
    const expires = Number(query.get('expires'))
    const signature = query.get('signature') ?? ''
    const expected = Buffer.from(this.sign(key, expires))
    const given = Buffer.from(signature)
    if (!Number.isInteger(expires) || given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw new Forbidden('INVALID_SIGNATURE', 'The upload URL signature is not valid')
    }
    if (expires * 1000 <= this.platform.clock.now()) throw new Forbidden('UPLOAD_URL_EXPIRED', 'The upload URL has expired; request a new one')
    if (!contentType?.toLowerCase().startsWith('text/csv')) {
      throw new Unsupported('UNSUPPORTED_MEDIA_TYPE', 'Upload the file with Content-Type: text/csv')
    }
    const upload = await this.uploads.findOne({ _id: key })
    if (!upload) throw new NotFound('NOT_FOUND', 'Upload not found')
    if (upload.state === 'consumed') throw new InvalidState('UPLOAD_CONSUMED', 'This upload was already imported into a batch')
    const size = await this.blobs.write(key, body)
    await this.uploads.updateOne({ _id: key }, { $set: { state: 'uploaded', size } })
    return { tempCsvKey: key, size }
  }

  /** Checks that the upload is ready and that every mapped column exists in its header. */
  async checkUpload(accountId: string, key: string, mapping: ColumnMapping) {
    const upload = await this.uploads.findOne({ _id: key, accountId, expiresAt: { $gt: new Date(this.platform.clock.now()) } })
    if (!upload) throw new Invalid('UPLOAD_NOT_FOUND', `No uploaded file for tempCsvKey ${key}`, { field: 'tempCsvKey' })
    if (upload.state === 'awaiting') throw new Invalid('UPLOAD_NOT_READY', 'The file has not been uploaded to uploadUrl yet', { field: 'tempCsvKey' })
    if (upload.state === 'consumed') throw new InvalidState('UPLOAD_CONSUMED', 'This upload was already imported into a batch')
    const header = await this.readHeader(key)
    const mapped = [mapping.identifier, mapping.name, ...(mapping.phone ?? []), ...(mapping.email ?? []), ...(mapping.whatsapp ?? []), mapping.scheduledAt, mapping.contactPriority, ...(mapping.customFields ?? [])]
    const missing = [...new Set(mapped.filter((c): c is string => !!c && !header.includes(c)))]
    if (missing.length > 0) {
      throw new Invalid('UNKNOWN_COLUMNS', `columnMapping names columns the CSV header does not have: ${missing.join(', ')}`, { missing, header })
    }
  }

  private async readHeader(key: string): Promise<string[]> {
    const source = this.blobs.read(key)
    const parser = parseBlob(source, { to_line: 1, bom: true, trim: true, relax_column_count: true, max_record_size: MAX_CSV_RECORD_BYTES })
    try {
      for await (const record of parser) return record as string[]
      return []
    } catch (error) {
      if (!recordTooLarge(error)) throw error
      throw new Invalid('CSV_RECORD_TOO_LARGE', `The CSV header line is longer than ${MAX_CSV_RECORD_BYTES} bytes`, { field: 'tempCsvKey' })
    } finally {
      source.destroy()
    }
  }

  /** Called by batch creation: the upload is consumed and the import queued. */
  async start(batch: BatchDoc, key: string, mapping: ColumnMapping, principal: Principal) {
    const claimed = await this.uploads.updateOne({ _id: key, state: 'uploaded' }, { $set: { state: 'consumed' } })
    if (claimed.modifiedCount !== 1) throw new InvalidState('UPLOAD_CONSUMED', 'This upload was already imported into a batch')
    const op = await this.operations.createLoad({
      accountId: batch.accountId,
      batchId: batch._id,
      type: 'contacts.import',
      requestedCount: 0,
      totalChunks: 0,
      sealed: false,
      actor: { id: principal.keyId, name: principal.keyName },
    })
    await this.batches.update(batch._id, { importOperationId: op._id })
    await this.queue.publish({ batchId: batch._id, operationId: op._id, tempCsvKey: key, columnMapping: mapping })
    return op
  }

  private async run(delivery: Delivery<ImportMessage>) {
    const { batchId, operationId, tempCsvKey, columnMapping } = delivery.data
    const op = await this.operations.findById(operationId)
    if (!op || op.kind !== 'contacts.load' || op.sealed) return
    const size = (await this.blobs.size(tempCsvKey)) ?? 0
    await this.batches.update(batchId, { uploadStatus: 'processing', uploadProgress: 0 })
    const chunkSize = this.platform.config.dialer.chunkSize
    const source = this.blobs.read(tempCsvKey)
    const parser = parseBlob(source, { columns: true, bom: true, trim: true, skip_empty_lines: true, relax_column_count: true, max_record_size: MAX_CSV_RECORD_BYTES })
    let rows = 0
    let chunkIndex = 0
    let errorCount = 0
    let contacts: QueuedContact[] = []
    let rejected: OperationError[] = []
    const flush = async () => {
      if (contacts.length === 0 && rejected.length === 0) return
      await this.loads.publishAll(op, [{ contacts: JSON.stringify(contacts), rejected }], chunkIndex++)
      contacts = []
      rejected = []
      const progress = size > 0 ? Math.min(99, Math.floor((parser.info.bytes / size) * 100)) : 99
      await this.batches.update(batchId, { uploadProgress: progress })
    }
    try {
      for await (const record of parser) {
        rows++
        const contact = mapRow(record as Record<string, string>, columnMapping)
        const issues = contactIssues(contact, this.platform.clock.now())
        if (issues.length > 0) {
          const identifier = contact.identifier ?? `row ${rows}`
          rejected.push({ identifier, reason: `row ${rows}: ${issues.map(i => i.reason).join('; ')}` })
          if (errorCount < MAX_STORED_ROW_ERRORS) {
            await this.rowErrors.insertMany(
              issues.map((issue, k) => ({
                _id: stableId(`${batchId}:${rows}:${k}`),
                batchId,
                row: rows,
                identifier: contact.identifier ?? null,
                field: issue.field.replace(/^contacts\[0\]\.?/, ''),
                code: issue.code,
                reason: issue.reason.replace(/contacts\[0\]\.?/g, ''),
              })),
              { ordered: false }, // a redelivered import re-inserts the same ids: skipped
            )
          }
          errorCount++
        } else {
          contacts.push(...queuedContacts([contact]))
        }
        if (contacts.length + rejected.length >= chunkSize) await flush()
      }
      await flush()
    } catch (error) {
      if (recordTooLarge(error)) {
        // Deterministic: a redelivery would read the same line. The import ends here, saying why.
        await this.rowErrors.insertMany(
          [{ _id: stableId(`${batchId}:${rows + 1}:too-large`), batchId, row: rows + 1, identifier: null, field: '(row)', code: 'CSV_RECORD_TOO_LARGE', reason: `the row is longer than ${MAX_CSV_RECORD_BYTES} bytes; the import stopped here` }],
          { ordered: false },
        )
        await this.batches.update(batchId, { uploadStatus: 'failed', importErrorCount: errorCount + 1 })
        await this.operations.closeLoad(op, 'failed')
        await this.discard(tempCsvKey)
        return
      }
      await this.batches.update(batchId, { uploadStatus: 'failed', importErrorCount: errorCount })
      throw error
    }
    await this.batches.update(batchId, { importErrorCount: errorCount })
    await this.operations.seal(operationId, chunkIndex, rows)
    // Every row is in the load's chunks now: the file is no longer needed.
    await this.discard(tempCsvKey)
    await this.loads.tryFinish(operationId)
  }

  /**
   * Removes an imported file. A failure (the object store unreachable) must not stop the import's
   * last steps: a redelivery would find the operation sealed and never finish it. The sweep removes
   * the file later (consumed, older than the retention).
   */
  private async discard(key: string) {
    try {
      await this.blobs.remove(key)
    } catch (error) {
      this.platform.logger.warn('imported CSV file not removed; the upload sweep will', { tempCsvKey: key, error })
    }
  }

  /**
   * Removes uploaded files nobody can import any more: their upload record expired (retention)
   * or was consumed and the import finished or gave up. Looks at SWEEP_BATCH files per call.
   * Returns how many files it removed.
   */
  async sweepFiles(): Promise<number> {
    const now = this.platform.clock.now()
    let removed = 0
    for (const { key, modifiedAt } of await this.blobs.list(SWEEP_BATCH)) {
      const upload = await this.uploads.findOne({ _id: key })
      const expired = !upload || upload.expiresAt.getTime() <= now
      // A consumed upload's import reads the file; it removes the file itself when done. One that
      // still lingers after the retention gave up (its redeliveries ran out).
      const abandoned = upload?.state === 'consumed' && now - modifiedAt > UPLOAD_RETENTION_MS
      if (expired || abandoned) {
        await this.blobs.remove(key)
        if (upload) await this.uploads.deleteOne({ _id: key })
        removed++
      }
    }
    return removed
  }

  async listRowErrors(batchId: string, limit: number, offset: number) {
    const [docs, total] = await Promise.all([
      this.rowErrors.find({ batchId }, { sort: { row: 1, _id: 1 }, skip: offset, limit }),
      this.rowErrors.countDocuments({ batchId }),
    ])
    return { data: docs.map(({ _id, batchId: _b, ...rest }) => rest), total }
  }
}

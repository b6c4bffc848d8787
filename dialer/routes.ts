// The dialer's HTTP surface (spec 4.1). Handlers only translate HTTP to the services.
import { Invalid, NotFound } from '../platform/errors.js'
import { enumParam, intParam } from '../gateway/query.js'
import { jsonRoute, type JsonRoute, type RequestContext, type Route } from '../platform/http.js'
import { ADDRESS_TYPES } from '../schemas/index.js'
import type { Platform } from '../platform/index.js'
import { validateLoad } from './contact-validation.js'
import { type Batches, type BatchDoc, batchView } from './batches.js'
import type { BatchLifecycle } from './lifecycle.js'
import type { BatchLog } from './batch-log.js'
import type { BlockedAddresses } from './blocked-addresses.js'
import type { CsvImports } from './csv-import.js'
import type { ContactLoads } from './loads.js'
import type { Contacts } from './contacts.js'
import { operationView, type Operations, type LifecycleType } from './operations.js'
import type { Idempotency } from './idempotency.js'
import type { Attempts } from './attempts.js'
import { type ContactControl, emptyProgress } from './scheduler/index.js'
import { OUTCOMES } from './rules.js'
import type { WebhookOutcomes } from './providers/index.js'
import type { Erasures } from './erasure.js'

const V1 = '/dialer/v1'
const TAG = 'Dialer'

export interface DialerServices {
  platform: Platform
  batches: Batches
  loads: ContactLoads
  contacts: Contacts
  lifecycle: BatchLifecycle
  operations: Operations
  log: BatchLog
  blocked: BlockedAddresses
  imports: CsvImports
  idempotency: Idempotency
  attempts: Attempts
  control: ContactControl
  /** Outcomes reported by the webhook provider's receiver. */
  outcomes: WebhookOutcomes
  erasures: Erasures
}

type Page = { limit: number; offset: number }

const page = (ctx: RequestContext): Page => ({
  limit: intParam(ctx.query, 'limit', { min: 1, max: 1000, fallback: 50 }),
  offset: intParam(ctx.query, 'offset', { min: 0, fallback: 0 }),
})

const accepted = (result: { operationUrl: string }) => ({ status: 202, body: result, headers: { Location: result.operationUrl } })
const actorOf = (ctx: RequestContext) => ({ id: ctx.principal.keyId, name: ctx.principal.keyName })

export function dialerRoutes(s: DialerServices): Route[] {
  const write = (route: JsonRoute) => s.idempotency.wrap(route)

  const lifecycleRoute = (method: 'post' | 'del', path: string, type: LifecycleType, summary: string): JsonRoute =>
    write({
      method,
      path,
      role: 'dialer',
      tag: TAG,
      summary,
      responses: { '202': { description: 'Accepted; poll the batch.lifecycle operation at Location', schema: 'dialer.lifecycle.accepted' }, '404': { description: 'No such batch' }, '409': { description: 'Not allowed in the current status' } },
      handle: async ctx => accepted(await s.lifecycle.request(ctx.principal, ctx.params.batchId!, type)),
    })

  /**
   * GET `/batches/:batchId/<path>`: records of one batch, paged. The batch is read first (404 when
   * it is unknown or another account's); `filter` reads the query before the page parameters.
   */
  const batchListRoute = <F>(path: string, summary: string, filter: (ctx: RequestContext) => F, list: (batch: BatchDoc, filter: F, page: Page) => Promise<unknown>, schema?: string): JsonRoute => ({
    method: 'get',
    path: `${V1}/batches/:batchId/${path}`,
    role: 'dialer',
    tag: TAG,
    summary,
    ...(schema ? { responses: { '200': { description: summary, schema }, '404': { description: 'No such batch' } } } : {}),
    handle: async ctx => {
      const batch = await s.batches.get(ctx.principal.accountId, ctx.params.batchId!)
      const query = filter(ctx)
      return { status: 200, body: await list(batch, query, page(ctx)) }
    },
  })
  const noFilter = () => ({})

  return [
    write(jsonRoute({
      method: 'post',
      path: `${V1}/batches`,
      role: 'dialer',
      tag: TAG,
      summary: 'Create a batch (source api, or csv with tempCsvKey and columnMapping)',
      requestSchema: 'dialer.batch.create',
      responses: { '201': { description: 'Created', schema: 'dialer.batch' }, '400': { description: 'Invalid body' } },
      handle: async ctx => {
        const input = ctx.input
        const csv = input.tempCsvKey !== undefined
        if (input.source === 'csv' && !csv) throw new Invalid('VALIDATION_FAILED', 'source csv requires tempCsvKey and columnMapping', { details: [{ field: 'tempCsvKey', code: 'REQUIRED', reason: 'tempCsvKey is required for source csv' }] })
        if (input.source === 'api' && csv) throw new Invalid('VALIDATION_FAILED', 'tempCsvKey is only valid with source csv', { details: [{ field: 'source', code: 'INVALID_VALUE', reason: 'use source csv (or omit source) with tempCsvKey' }] })
        if (csv) await s.imports.checkUpload(ctx.principal.accountId, input.tempCsvKey!, input.columnMapping!)
        const batch = await s.batches.create({
          accountId: ctx.principal.accountId,
          name: input.name,
          channel: input.channel,
          source: csv ? 'csv' : 'api',
          duplicateStrategy: input.duplicateStrategy,
          rules: input.rules ?? {},
          tempCsvKey: input.tempCsvKey ?? null,
          createdBy: actorOf(ctx),
        })
        await s.log.append({ accountId: batch.accountId, batchId: batch._id, operation: 'created', actor: actorOf(ctx), details: { source: batch.source } })
        if (csv) {
          const op = await s.imports.start(batch, input.tempCsvKey!, input.columnMapping!, ctx.principal)
          batch.importOperationId = op._id
        }
        return { status: 201, body: { ...batchView(batch), progress: emptyProgress() } }
      },
    })),
    {
      method: 'get',
      path: `${V1}/batches`,
      role: 'dialer',
      tag: TAG,
      summary: 'List batches (newest first); query status, limit, offset',
      responses: { '200': { description: 'A page of batches', schema: 'dialer.batch.list' } },
      handle: async ctx => {
        const status = enumParam(ctx.query, 'status', ['created', 'running', 'stopped', 'completed', 'archived', 'deleting'] as const)
        const { limit, offset } = page(ctx)
        return { status: 200, body: await s.batches.list(ctx.principal.accountId, { status }, limit, offset) }
      },
    },
    write(jsonRoute({
      method: 'post',
      path: `${V1}/batches/upload-url`,
      role: 'dialer',
      tag: TAG,
      summary: 'Get a signed URL (valid 1 hour) to PUT a CSV file to',
      requestSchema: 'dialer.upload-url.create',
      responses: { '201': { description: 'uploadUrl, tempCsvKey, expiresAt', schema: 'dialer.upload-url' }, '429': { description: 'UPLOAD_LIMIT_EXCEEDED' } },
      handle: async ctx => {
        return { status: 201, body: await s.imports.createUploadUrl(ctx.principal, ctx.input.fileName) }
      },
    })),
    {
      kind: 'upload',
      method: 'put',
      path: `${V1}/uploads/:uploadKey`,
      role: null,
      tag: TAG,
      summary: 'Upload the CSV to a signed URL (no apikey; Content-Type: text/csv)',
      responses: { '200': { description: 'Stored', schema: 'dialer.upload.stored' }, '403': { description: 'Bad or expired signature' }, '415': { description: 'Not text/csv' } },
      handle: async (ctx, stream) => ({
        status: 200,
        body: await s.imports.receive(ctx.params.uploadKey!, ctx.query, ctx.headers['content-type'], stream),
      }),
    },
    {
      method: 'get',
      path: `${V1}/batches/operations/:operationId`,
      role: 'dialer',
      tag: TAG,
      summary: 'Read an operation (contacts.load, batch.lifecycle or person.erasure); 404 once retention expired',
      responses: { '200': { description: 'The operation; read kind first', schema: 'dialer.operation' }, '404': { description: 'Unknown, another account\'s, or past retention' } },
      handle: async ctx => {
        const op = await s.operations.find(ctx.principal.accountId, ctx.params.operationId!)
        if (!op) throw new NotFound('NOT_FOUND', 'Operation not found (unknown, or its retention has expired)')
        return { status: 200, body: operationView(op) }
      },
    },
    {
      method: 'get',
      path: `${V1}/batches/:batchId`,
      role: 'dialer',
      tag: TAG,
      summary: 'Read a batch, including uploadStatus, uploadProgress, totalContacts and dialing progress',
      responses: { '200': { description: 'The batch', schema: 'dialer.batch' }, '404': { description: 'No such batch' } },
      handle: async ctx => {
        const batch = await s.batches.get(ctx.principal.accountId, ctx.params.batchId!)
        return { status: 200, body: { ...batchView(batch), progress: await s.control.progress(batch._id) } }
      },
    },
    lifecycleRoute('post', `${V1}/batches/:batchId/start`, 'batch.start', 'Start dialing a batch'),
    lifecycleRoute('post', `${V1}/batches/:batchId/stop`, 'batch.stop', 'Stop dialing a batch'),
    lifecycleRoute('post', `${V1}/batches/:batchId/archive`, 'batch.archive', 'Archive a batch'),
    lifecycleRoute('del', `${V1}/batches/:batchId`, 'batch.delete', 'Delete a batch and its contacts'),
    write({
      method: 'post',
      path: `${V1}/batches/:batchId/contacts`,
      role: 'dialer',
      tag: TAG,
      summary: 'Insert contacts (one object, or {contacts:[1..1000]}); processed in the background',
      requestSchema: 'dialer.contacts.insert',
      bodyCheckedByHandler: true,
      responses: { '202': { description: 'Queued; poll the operation at Location', schema: 'dialer.insert.accepted' }, '400': { description: 'Invalid contacts or account cap exceeded' }, '404': { description: 'No such batch' } },
      handle: async ctx => {
        // Checked and chunked off the event loop (a worker thread) when large: live sessions are not held.
        const { config } = s.platform
        const rules = { now: s.platform.clock.now(), maxJsonDepth: config.edge.maxJsonDepth, chunkSize: config.dialer.chunkSize }
        const load = await validateLoad(ctx.body, rules, config.dialer.validationThreads)
        return accepted(await s.loads.accept(ctx.principal, ctx.params.batchId!, load))
      },
    }),
    batchListRoute(
      'contacts',
      'List the contacts of a batch (oldest first); query identifier, state, limit, offset',
      ctx => ({ identifier: ctx.query.get('identifier') || undefined, state: enumParam(ctx.query, 'state', ['pending', 'in_progress', 'done', 'cancelled'] as const) }),
      (batch, filter, { limit, offset }) => s.contacts.list(batch._id, filter, limit, offset),
      'dialer.contact.list',
    ),
    {
      method: 'get',
      path: `${V1}/batches/:batchId/contacts/:contactId`,
      role: 'dialer',
      tag: TAG,
      summary: 'Read one contact with its attempt history and whether (or why not, and when) it may be dialed now',
      responses: { '200': { description: 'The contact, attemptHistory and dialability', schema: 'dialer.contact.view' }, '404': { description: 'No such batch or contact' } },
      handle: async ctx => {
        const batch = await s.batches.get(ctx.principal.accountId, ctx.params.batchId!)
        return { status: 200, body: await s.control.detail(batch, ctx.params.contactId!) }
      },
    },
    write(jsonRoute({
      method: 'post',
      path: `${V1}/batches/:batchId/contacts/:contactId/reschedule`,
      role: 'dialer',
      tag: TAG,
      summary: 'Set the next attempt of a contact (scheduledAt: UTC, future, within 30 days); a done or cancelled contact is dialed again',
      requestSchema: 'dialer.contact.reschedule',
      responses: { '200': { description: 'The contact', schema: 'dialer.contact.view' }, '400': { description: 'Invalid scheduledAt' }, '404': { description: 'No such batch or contact' }, '409': { description: 'The contact is being dialed now' } },
      handle: async ctx => {
        const batch = await s.batches.getWritable(ctx.principal.accountId, ctx.params.batchId!)
        return { status: 200, body: await s.control.reschedule(batch, ctx.params.contactId!, ctx.input.scheduledAt) }
      },
    })),
    write({
      method: 'post',
      path: `${V1}/batches/:batchId/contacts/:contactId/cancel`,
      role: 'dialer',
      tag: TAG,
      summary: 'Cancel a contact: no further attempts (one in flight ends and is recorded)',
      responses: { '200': { description: 'The contact', schema: 'dialer.contact.view' }, '404': { description: 'No such batch or contact' }, '409': { description: 'The contact is already done' } },
      handle: async ctx => {
        const batch = await s.batches.getWritable(ctx.principal.accountId, ctx.params.batchId!)
        return { status: 200, body: await s.control.cancel(batch, ctx.params.contactId!) }
      },
    }),
    batchListRoute(
      'attempts',
      'The attempts of a batch, newest first; query outcome, limit, offset',
      ctx => ({ outcome: enumParam(ctx.query, 'outcome', OUTCOMES) }),
      (batch, filter, { limit, offset }) => s.attempts.list(batch._id, filter, limit, offset),
      'dialer.attempt.list',
    ),
    jsonRoute({
      method: 'post',
      path: `${V1}/attempts/:attemptId/outcome`,
      role: null,
      tag: TAG,
      summary: 'Webhook provider callback: the outcome of an attempt (no apikey; HMAC-signed over switchboard.callback.v1.<timestamp>.<attemptId>.<body>)',
      requestSchema: 'dialer.attempt.outcome',
      requiredHeaders: ['X-Switchboard-Signature', 'X-Switchboard-Timestamp'],
      responses: {
        '200': { description: 'Accepted; the attempt ends with this outcome', schema: 'dialer.attempt.reported' },
        '400': { description: 'Invalid body' },
        '401': { description: 'INVALID_SIGNATURE: missing, stale or wrong signature' },
        '404': { description: 'No such webhook attempt' },
        '409': { description: 'ATTEMPT_FINISHED or OUTCOME_ALREADY_REPORTED (the first report wins)' },
      },
      // The signature covers the raw bytes: checked before the body is even parsed.
      preValidation: ctx => s.outcomes.authenticate(ctx.headers, ctx.params.attemptId!, ctx.body),
      handle: async ctx => ({ status: 200, body: await s.outcomes.report(ctx.params.attemptId!, ctx.input.outcome, ctx.input.detail ?? null) }),
    }),
    batchListRoute('logs', 'The batch audit log, newest first; query limit, offset', noFilter, (batch, _, { limit, offset }) => s.log.list(batch.accountId, batch._id, limit, offset), 'dialer.batch.logs'),
    batchListRoute('import-errors', 'Per-row errors of the CSV import (row number, field, code, reason)', noFilter, (batch, _, { limit, offset }) =>
      s.imports.listRowErrors(batch._id, limit, offset),
      'dialer.import-errors',
    ),
    write(jsonRoute({
      method: 'post',
      path: `${V1}/erasures`,
      role: 'dialer',
      tag: TAG,
      summary: "Erase one person from the account (by address, contact identifier or both): contacts, attempts, session histories and texts; do-not-call blocks stay without the address",
      requestSchema: 'dialer.erasure.create',
      responses: {
        '202': { description: 'Accepted; poll the person.erasure operation at Location for its counts', schema: 'dialer.erasure.accepted' },
        '400': { description: 'VALIDATION_FAILED: no address and no identifier, or one that is not valid' },
      },
      handle: async ctx => accepted(await s.erasures.request(ctx.principal, ctx.input)),
    })),
    write(jsonRoute({
      method: 'post',
      path: `${V1}/blocked-addresses`,
      role: 'dialer',
      tag: TAG,
      summary: 'Block addresses for the whole account',
      requestSchema: 'dialer.blocked-addresses.block',
      responses: { '200': { description: 'How many were blocked and skipped (already blocked or repeated)', schema: 'dialer.blocked.result' }, '400': { description: 'ADDRESS_REQUIRED or VALIDATION_FAILED' } },
      handle: async ctx => ({ status: 200, body: await s.blocked.block(ctx.principal.accountId, actorOf(ctx), ctx.input) }),
    })),
    write(jsonRoute({
      method: 'del',
      path: `${V1}/blocked-addresses`,
      role: 'dialer',
      tag: TAG,
      summary: 'Unblock addresses (addressType must equal the one used to block)',
      requestSchema: 'dialer.blocked-addresses.unblock',
      responses: { '200': { description: 'How many were removed', schema: 'dialer.unblocked.result' }, '400': { description: 'ADDRESS_REQUIRED or VALIDATION_FAILED' } },
      handle: async ctx => ({ status: 200, body: await s.blocked.unblock(ctx.principal.accountId, ctx.input) }),
    })),
    {
      method: 'get',
      path: `${V1}/blocked-addresses`,
      role: 'dialer',
      tag: TAG,
      summary: 'List blocked addresses; query addressType, address, limit, offset',
      responses: { '200': { description: 'A page of blocked addresses, newest first', schema: 'dialer.blocked.list' } },
      handle: async ctx => {
        const addressType = enumParam(ctx.query, 'addressType', ADDRESS_TYPES)
        const address = ctx.query.get('address') || undefined
        const { limit, offset } = page(ctx)
        return { status: 200, body: await s.blocked.list(ctx.principal.accountId, { addressType, address }, limit, offset) }
      },
    },
  ]
}

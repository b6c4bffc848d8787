// The dialer module: batches, contact loads (API and CSV), blocked addresses, the batch log
// and idempotent writes. Workers (chunk application, lifecycle, CSV import) run wherever the
// module is started with workers on.
import type { ServiceModule } from '../platform/http.js'
import type { Platform } from '../platform/index.js'
import type { Store } from '../platform/store/index.js'
import { FileBlobStore, type BlobStore } from '../platform/blobs.js'
import { INDEXES } from './collections.js'
import { Batches } from './batches.js'
import { BatchLog } from './batch-log.js'
import { BatchLifecycle } from './lifecycle.js'
import { BlockedAddresses } from './blocked-addresses.js'
import { CsvImports } from './csv-import.js'
import { ContactLoads } from './loads.js'
import { ChunkThread } from './chunk-thread.js'
import { QueueWorkers } from './queue-workers.js'
import { Contacts } from './contacts.js'
import { Operations } from './operations.js'
import { Idempotency } from './idempotency.js'
import { dialerRoutes } from './routes.js'
import { Attempts } from './attempts.js'
import { markDueOrderedContacts } from './due-ordered-contacts.js'
import { createProviders, WEBHOOK_REPORTS, WebhookOutcomes, type WebhookReportDoc } from './providers/index.js'
import type { SessionTransport } from '../engine/transport.js'
import { ContactControl, registerScheduler, Scheduler } from './scheduler/index.js'
import { BatchRetention, retentionIndexes } from './retention.js'
import { Erasures } from './erasure.js'

const retentions = new WeakMap<Platform, BatchRetention>()

/** The finished-batch retention a running service created (tests run its passes). */
export function retentionOf(platform: Platform): BatchRetention {
  const retention = retentions.get(platform)
  if (!retention) throw new Error('no dialer on this platform')
  return retention
}

export interface DialerOptions {
  idempotencyStore: Store
  /** Where uploaded CSV files are kept (default: files under DATA_DIR/uploads). */
  blobs?: BlobStore
  workers?: boolean
  /** The engine's session transport for the assistant provider (looked up per attempt). */
  sessionTransport?: () => SessionTransport | undefined
}

export interface DialerModule extends ServiceModule {
  /** Told the port the gateway listens on, for the absolute URLs it hands out. */
  listening(port: number): void
}

export function createDialer(platform: Platform, options: DialerOptions): DialerModule {
  let uploadSweep: NodeJS.Timeout | undefined
  const { store, clock } = platform
  const batches = new Batches(store, clock)
  const operations = new Operations(store, clock)
  const log = new BatchLog(store, clock)
  // Beside the embedded store, chunks are applied off the loop that serves live sessions.
  const chunkThread = store.sharedPath && platform.config.dialer.applyThread ? new ChunkThread(store.sharedPath, clock, () => store.renewReads?.()) : undefined
  const loads = new ContactLoads(platform, batches, operations, log, chunkThread)
  const lifecycle = new BatchLifecycle(platform, batches, operations, log)
  const imports = new CsvImports(platform, options.blobs ?? new FileBlobStore(platform.config.dataDir), batches, operations, loads)
  const blocked = new BlockedAddresses(store, clock)
  const idempotency = new Idempotency(options.idempotencyStore, clock, platform.logger, platform.config.dialer.idempotency)
  const erasures = new Erasures(platform, operations, options.idempotencyStore, () => options.sessionTransport?.())
  const queueWorkers = new QueueWorkers([loads.worker, lifecycle.worker, imports.worker, erasures.worker])
  const attempts = new Attempts(store)
  const webhookReports = store.collection<WebhookReportDoc>(WEBHOOK_REPORTS)
  const providers = createProviders(platform.config, { webhookReports, transport: options.sessionTransport })
  // Signatures are checked against real time (the sender's clock), not the service clock.
  const outcomes = new WebhookOutcomes(platform.config.dialer.webhook.secret, attempts.docs, webhookReports, providers.webhook, () => Date.now())
  const retention = new BatchRetention(store, clock, platform.logger, platform.config.retention.finishedBatchesDays)
  retentions.set(platform, retention)
  batches.onFinishChanged = () => retention.kick()
  const scheduler = new Scheduler(platform, { log, attempts, providers, finished: () => retention.kick() })
  registerScheduler(platform, scheduler)
  const control = new ContactControl(platform, attempts)

  return {
    name: 'dialer',
    routes: dialerRoutes({ platform, batches, loads, contacts: new Contacts(store), lifecycle, operations, log, blocked, imports, idempotency, attempts, control, outcomes, erasures }),
    async start() {
      for (const [collection, indexes] of Object.entries(INDEXES)) await store.ensureIndexes(collection, indexes)
      await idempotency.ensureIndexes()
      await store.ensureIndexes(WEBHOOK_REPORTS, [{ name: 'received_ttl', key: { receivedAt: 1 }, expireAfterSeconds: 7 * 86_400 }])
      for (const [collection, indexes] of Object.entries(retentionIndexes(platform.config.retention))) await store.ensureIndexes(collection, indexes)
      await loads.active.start(platform.logger)
      if (options.workers !== false) {
        await markDueOrderedContacts(store, platform.logger)
        queueWorkers.start()
        scheduler.start(platform.config.dialer.cycleMs)
        retention.start()
        uploadSweep = setInterval(() => {
          imports.sweepFiles().catch(error => platform.logger.warn('upload sweep failed', { error }))
        }, platform.config.dialer.uploadSweepMs)
        uploadSweep.unref()
      }
    },
    listening(port) {
      imports.listening(port)
    },
    async stop() {
      if (uploadSweep) clearInterval(uploadSweep)
      // Attempts waiting on a webhook report or an assistant session end now (as failed).
      providers.close()
      await scheduler.stop()
      await retention.stop()
      await queueWorkers.stop()
      await chunkThread?.close()
      await loads.active.stop()
    },
  }
}

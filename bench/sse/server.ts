// The server side of the SSE bench, run as a child process so the load generator does not
// share its event loop: `switchboard` is the whole service (uWebSockets.js gateway, XState
// actors, store writes, scripted assistant); `baseline` is a plain node:http SSE server doing
// the same protocol work (same paths, frames, payloads and reply chunking) and nothing else.
import { randomUUID } from 'node:crypto'
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

const mode = process.argv[2]
const KEY = 'bench-key-0000000000000000'
const CHANNEL = '/assistants-channel/api/v1/channel/api/eventstream'

function memory() {
  ;(globalThis as any).gc?.()
  const m = process.memoryUsage()
  return { rss: m.rss, heapUsed: m.heapUsed, external: m.external }
}

async function startSwitchboard(): Promise<number> {
  const { loadConfig } = await import('../../platform/config.js')
  const { createLogger } = await import('../../platform/logger.js')
  const { startService } = await import('../../service.js')
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    API_KEYS: `${KEY}=bench`,
    LOG_LEVEL: 'silent',
    CREWS_FILE: process.env.BENCH_CREWS_FILE!,
    DATA_DIR: `/tmp/switchboard-bench-${randomUUID()}`,
  })
  const service = await startService(config, { logger: createLogger('silent') })
  return service.port
}

function startBaseline(): Promise<number> {
  const streams = new Map<string, { res: ServerResponse; nextId: number }>()
  const frame = (s: { res: ServerResponse; nextId: number }, event: string, data: unknown) =>
    s.res.write(`id: ${s.nextId++}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`)
  const server = createServer((req, res) => {
    if (req.headers.apikey !== KEY) {
      res.writeHead(401, { 'content-type': 'application/json' })
      return res.end('{"code":"UNAUTHORIZED"}')
    }
    const parts = (req.url ?? '').slice(CHANNEL.length + 1).split('/')
    const chunks: Buffer[] = []
    req.on('data', c => chunks.push(c))
    req.on('end', () => {
      if (req.method === 'POST' && parts.length === 1) {
        const sessionId = randomUUID()
        const consumerId = randomUUID()
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
        const s = { res, nextId: 1 }
        streams.set(sessionId, s)
        res.on('close', () => streams.delete(sessionId))
        frame(s, 'Initialized', { sessionId, consumerId })
        frame(s, 'crew.status.waiting', { sessionId, agentId: 'general' })
        return
      }
      if (req.method === 'PUT' && parts.length === 2) {
        const [sessionId, consumerId] = parts as [string, string]
        const s = streams.get(sessionId)
        let message: unknown
        try {
          message = JSON.parse(Buffer.concat(chunks).toString('utf8')).message
        } catch {}
        if (!s || typeof message !== 'string') {
          res.writeHead(s ? 400 : 404, { 'content-type': 'application/json' })
          return res.end('{"code":"BAD_REQUEST"}')
        }
        res.writeHead(201, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ sessionId, consumerId, status: 'accepted' }))
        const text = `You said: ${message}`
        const turnId = s.nextId
        const messageId = `t${turnId}.0`
        frame(s, 'crew.status.writing', { sessionId, agentId: 'general', turnId })
        for (const [index, delta] of (text.match(/\S+\s*/g) ?? []).entries()) frame(s, 'assistant.response', { sessionId, messageId, turnId, index, delta })
        frame(s, 'assistant.message', { sessionId, messageId, turnId, agentId: 'general', text, at: Date.now() })
        frame(s, 'crew.status.waiting', { sessionId, agentId: 'general' })
        return
      }
      res.writeHead(404)
      res.end()
    })
  })
  server.keepAliveTimeout = 60_000
  server.headersTimeout = 65_000
  server.requestTimeout = 0
  server.maxConnections = 100_000
  return new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)))
}

const port = mode === 'baseline' ? await startBaseline() : await startSwitchboard()
process.on('message', (m: any) => {
  if (m?.type === 'memory') process.send!({ type: 'memory', memory: memory() })
})
process.on('SIGTERM', () => process.exit(0))
process.on('disconnect', () => process.exit(0))
process.send!({ type: 'ready', port, key: KEY })

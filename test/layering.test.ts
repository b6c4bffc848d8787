// The house's floors, as its imports say them (README, under the folder tree):
// platform/ and schemas/ are the ground (infrastructure and the schemas, knowing no module), the
// gateway stands on them, and the modules (engine/, dialer/, reports/) stand on all three and
// reach each other only through a module's public index.ts. Entry points (main.ts, service.ts,
// cli/) may wire anything. Each import that breaks a rule today is listed below with why, so
// none is added silently, and one that is gone must leave the list (it only shrinks).
import t from 'tap'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const MODULES = ['engine', 'dialer', 'reports']
/** What each folder may import besides itself (a module: other modules' index.ts only). */
const MAY_IMPORT: Record<string, string[]> = {
  platform: [],
  schemas: [],
  gateway: ['platform', 'schemas'],
  reports: ['platform', 'schemas'],
  engine: ['platform', 'schemas', 'reports'],
  dialer: ['platform', 'schemas', 'engine', 'reports'],
}

/** Today's exceptions: "file -> imported file", each with why it is still there. */
const KNOWN: Record<string, string> = {
  'platform/bus/types.ts -> schemas/wire.ts': 'the bus names its wire message types from the schemas',
  'platform/config.ts -> schemas/wire.ts': 'NATS_WIRE_VERSION is checked against the versions the schemas declare',
  'platform/http.ts -> schemas/index.ts': 'route declarations carry their body schemas',
  'platform/wire.ts -> schemas/wire.ts': 'the codec checks messages against their schemas',
  'schemas/wire.ts -> platform/errors.ts': 'error kinds on the wire are the domain error kinds',
  'engine/index.ts -> gateway/socket-tickets.ts': 'socket tickets are issued by an engine route',
  'engine/index.ts -> gateway/relay-tokens.ts': 'ConversationRelay tokens are issued by an engine route',
  'engine/routes/conversation-relay.ts -> gateway/relay-tokens.ts': 'the relay route checks its token',
  'engine/streams/conversation-relay.ts -> gateway/request.ts': 'JSON frame parsing shares the body parser',
  'engine/routes/channel-socket.ts -> gateway/sse.ts': 'SSE framing of events shared with the socket',
  'engine/routes/channel-socket.ts -> gateway/socket-tickets.ts': 'the socket route redeems tickets',
  'engine/routes/channel.ts -> gateway/sse.ts': 'the channel routes answer with SSE streams',
  'engine/routes/supervision.ts -> gateway/query.ts': 'query-string parsing lives in the gateway',
  'engine/streams/channel-socket.ts -> gateway/request.ts': 'JSON frame parsing shares the body parser',
  'engine/streams/event-log.ts -> gateway/sse.ts': 'the replay ring keeps events as SSE text',
  'engine/streams/hub.ts -> gateway/sse.ts': 'the hub writes SSE frames',
  'engine/streams/socket-stream.ts -> gateway/sse.ts': 'socket frames are cut from the SSE text',
  'engine/streams/socket-stream.ts -> gateway/write-window.ts': 'one write window for both transports',
  'engine/supervision/session-feed.ts -> gateway/sse.ts': 'the feed is an SSE stream',
  'engine/supervision/session-watch.ts -> gateway/sse.ts': 'the watch is an SSE stream',
  'dialer/erasure.ts -> engine/transport.ts': 'erasure closes live sessions through the transport type',
  'dialer/erasure.ts -> engine/persistence/session-store.ts': 'erasure builds the session store itself',
  'dialer/index.ts -> engine/transport.ts': 'the dialer is handed the session transport',
  'dialer/providers/assistant.ts -> engine/transport.ts': 'the assistant provider opens sessions through the transport',
  'dialer/providers/index.ts -> engine/transport.ts': 'providers are handed the session transport',
  'dialer/load-chunks.ts -> gateway/request.ts': 'JSON parsing of chunk bodies shares the body parser',
  'dialer/routes.ts -> gateway/query.ts': 'query-string parsing lives in the gateway',
}

function imports(): string[] {
  const found: string[] = []
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir)) {
      const path = join(dir, entry)
      if (statSync(path).isDirectory()) walk(path)
      else if (path.endsWith('.ts')) {
        for (const m of readFileSync(path, 'utf8').matchAll(/(?:\bfrom|\bimport\()\s*'(\.{1,2}\/[^']+)'/g)) {
          found.push(`${relative(ROOT, path)} -> ${relative(ROOT, resolve(dirname(path), m[1]!)).replace(/\.js$/, '.ts')}`)
        }
      }
    }
  }
  for (const folder of Object.keys(MAY_IMPORT)) walk(join(ROOT, folder))
  return found
}

function breaksARule(edge: string): boolean {
  const [from, to] = edge.split(' -> ') as [string, string]
  const [a, b] = [from.split('/')[0]!, to.split('/')[0]!]
  if (a === b) return false
  if (!MAY_IMPORT[a]!.includes(b)) return true
  return MODULES.includes(b) && to !== `${b}/index.ts`
}

t.test('every import follows the floors, or is a known exception', async t => {
  const all = imports()
  t.ok(all.length > 500, `the scan read the code (${all.length} relative imports)`)
  const breaking = [...new Set(all.filter(breaksARule))].sort()
  t.same(breaking.filter(edge => !(edge in KNOWN)), [], 'no new import across the floors (or into a module past its index.ts)')
  t.same(Object.keys(KNOWN).filter(edge => !breaking.includes(edge)), [], 'every known exception still exists (remove the ones that are gone)')
})

// The wire protocol's codec (platform/wire.ts): what a version writes, what a reader accepts
// (the previous version and its own, each against its schema), what it refuses (logged once,
// counted, nothing returned), and errors rebuilt as the same domain error on the other side.
import t from 'tap'
import { fileURLToPath } from 'node:url'
import { createMetrics } from '../../platform/metrics.js'
import { InvalidState, LimitReached, NotFound, ShuttingDown } from '../../platform/errors.js'
import { httpError } from '../../platform/http.js'
import { Wire, WIRE_VERSION, WIRE_VERSIONS, type WireError, type WireMessage } from '../../platform/wire.js'
import { wireProblem, wireSchemas } from '../../schemas/wire.js'
import type { Logger } from '../../platform/logger.js'
import { refusedLines } from '../support/compile.js'

function setup(writes?: 1 | 2 | 3) {
  const lines: { message: string; fields: Record<string, unknown> }[] = []
  const logger = { warn: (message: string, fields: Record<string, unknown>) => lines.push({ message, fields }) } as unknown as Logger
  const metrics = createMetrics()
  const wire = new Wire({ writes, logger, metrics })
  const refused = async () => (await metrics.wireRefused.get()).values.map(v => ({ ...v.labels, n: v.value }))
  return { wire, lines, refused }
}

const request = { target: { sessionId: 's1', accountId: 'acme' }, command: { type: 'user.message', consumerId: 'c1', text: 'hi' }, id: 'r1' }

t.test('every message has a schema in every version, and each compiles', async t => {
  const names = Object.keys(wireSchemas[1]).sort()
  for (const version of WIRE_VERSIONS) {
    t.same(Object.keys(wireSchemas[version]).sort(), names, `version ${version} has every message`)
    for (const name of names) t.doesNotThrow(() => wireProblem(name as WireMessage, version, {}), `${name} v${version}`)
  }
})

t.test('a message is written with its version and read back without it', async t => {
  const { wire } = setup()
  t.equal(WIRE_VERSION, 3)
  const text = wire.encode(request)
  t.same(JSON.parse(text).v, 3)
  t.same(wire.decode('session.request', Buffer.from(text)), { ok: true, v: 3, message: request })
  const previous = setup(2).wire.encode(request)
  t.same(JSON.parse(previous).v, 2, 'pinned to the previous version, a process writes it')
  t.same(wire.decode('session.request', previous), { ok: true, v: 2, message: request }, 'the previous version is read')
  const old = setup(1).wire.encode(request)
  t.notOk('v' in JSON.parse(old), 'version 1 has no v')
  t.same(wire.decode('session.request', old), { ok: true, v: 1, message: request }, 'and the one before it')
  t.same(wire.decode('engine.ping', ''), { ok: true, v: 1, message: {} }, "version 1's empty ping")
})

t.test('what a reader refuses: logged once, counted, nothing returned', async t => {
  const { wire, lines, refused } = setup()
  const cases: [string, string, string][] = [
    ['not JSON', '{"target":', 'json'],
    ['a version this build does not read', JSON.stringify({ ...request, v: 4 }), 'version'],
    ['a version that is not a number', JSON.stringify({ ...request, v: 'two' }), 'version'],
    ['a command the engine does not know', JSON.stringify({ ...request, v: 2, command: { type: 'admin.reboot', userId: 'x' } }), 'schema'],
    ['a field a command does not have', JSON.stringify({ ...request, v: 2, command: { ...request.command, sudo: true } }), 'schema'],
    ['a target without its account', JSON.stringify({ v: 2, target: { sessionId: 's1' } }), 'schema'],
    ['a version-1 shape labelled 2', JSON.stringify({ v: 2, ok: false, error: { status: 404, code: 'X', message: 'm' } }), 'schema'],
  ]
  for (const [name, payload, reason] of cases) {
    const decoded = wire.decode(name.includes('labelled') ? 'engine.reply' : 'session.request', payload, { subject: 'sb.session.s1.cmd' })
    t.match(decoded, { ok: false, reason }, name)
  }
  t.equal(lines.length, cases.length, 'one log line each')
  t.match(lines[3], { message: 'wire message refused', fields: { message: 'session.request', reason: 'schema', version: 2, subject: 'sb.session.s1.cmd', problem: /command/ } })
  t.same(await refused(), [
    { message: 'session.request', reason: 'json', n: 1 },
    { message: 'session.request', reason: 'version', n: 2 },
    { message: 'session.request', reason: 'schema', n: 3 },
    { message: 'engine.reply', reason: 'schema', n: 1 },
  ])
})

t.test('events, KV entries and work messages of every version', async t => {
  const { wire } = setup()
  const event = { kind: 'event', name: 'assistant.message', data: { sessionId: 's1', text: 'hello' }, seq: 4, epoch: 7 }
  t.same(wire.decode('session.event', wire.encode(event)), { ok: true, v: 3, message: event })
  t.same(wire.decode('session.event', wire.encode(event, 2)), { ok: true, v: 2, message: event })
  const batch = { kind: 'batch', events: [event, { ...event, seq: 5 }, { kind: 'closed', reason: 'ended', seq: 6, epoch: 7 }] }
  t.same(wire.decode('session.event', wire.encode(batch)), { ok: true, v: 3, message: batch }, 'version 3: several events of a session in one message')
  t.match(wire.decode('session.event', wire.encode(batch, 2)), { ok: false, reason: 'schema' }, 'version 2 has no batches')
  t.match(wire.decode('session.event', wire.encode({ kind: 'batch', events: [] })), { ok: false, reason: 'schema' }, 'an empty batch is refused')
  t.match(wire.decode('session.event', wire.encode({ kind: 'batch', events: [{ kind: 'owner', seq: 1, epoch: 2 }] })), { ok: false, reason: 'schema' }, 'an owner mark is never batched')
  t.same(wire.decode('session.event', JSON.stringify(event)), { ok: true, v: 1, message: event }, 'an event stored before the upgrade')
  t.match(wire.decode('session.event', JSON.stringify({ kind: 'owner', seq: 1, epoch: 2, v: 2, name: 'x' })), { ok: false, reason: 'schema' })
  t.match(wire.decode('engine.node', { node: 'n1', live: 3, at: 1 }), { ok: true, v: 1 })
  t.match(wire.decode('session.owner', { node: 'n1', at: 1, v: 2 }), { ok: true, v: 2, message: { node: 'n1', at: 1 } })
  const chunk = { operationId: 'o', accountId: 'a', batchId: 'b', index: 0, contacts: '[]', rejected: [] }
  t.match(wire.decode('queue.dialer.chunk', wire.encode(chunk)), { ok: true, message: chunk })
  t.match(wire.decode('queue.dialer.chunk', wire.encode({ ...chunk, index: -1 })), { ok: false, reason: 'schema' })
  t.match(wire.decode('queue.message', wire.encode({ anything: [1] })), { ok: true, message: { anything: [1] } })
})

t.test('errors cross as the same domain error, in the version of the request', async t => {
  const { wire } = setup()
  const errors = [
    new NotFound('SESSION_NOT_FOUND', 'Session s1 not found'),
    new InvalidState('INVALID_SESSION_STATE', 'cannot resume', { state: 'active', command: 'admin.resume' }),
    new LimitReached('SESSION_LIMIT_REACHED', 'full', { limit: 2 }, { retryAfterSeconds: 3 }),
    new ShuttingDown('The engine is shutting down; retry on another node'),
    new Error('a bug'),
  ]
  for (const error of errors) {
    for (const version of WIRE_VERSIONS) {
      const carried = wire.errorToWire(error, version)
      const reply = { ok: false, error: carried }
      const decoded = wire.decode<{ error: WireError }>('engine.reply', wire.encode(reply, version))
      t.ok(decoded.ok, `${error.message} v${version} is a valid reply`)
      const rebuilt = wire.errorFromWire((decoded as { message: { error: WireError } }).message.error)
      const [before, after] = [httpError(error) ?? { status: 500, body: () => ({ code: 'INTERNAL', message: 'Unexpected engine error' }), headers: {} }, httpError(rebuilt)!]
      t.same([after.status, after.body()], [before.status, before.body()], `${error.message}: the same status and body through v${version}`)
      // Version 1 never carried Retry-After; later versions do.
      t.same(after.headers, version === 1 ? {} : before.headers, `${error.message}: headers through v${version}`)
    }
  }
  t.match(wire.errorToWire(new NotFound('SESSION_NOT_FOUND', 'x'), 1), { status: 404, code: 'SESSION_NOT_FOUND' }, 'version 1 carries the status')
  t.notOk('status' in wire.errorToWire(new NotFound('SESSION_NOT_FOUND', 'x'), 2), 'version 2 does not')
})

t.test('a message name the protocol does not declare does not compile', async t => {
  const { refused, marked } = refusedLines(fileURLToPath(new URL('./fixtures/wire-names.ts', import.meta.url)))
  t.equal(marked.length, 3)
  t.same(refused, marked, 'exactly the misspelt names are refused')
})

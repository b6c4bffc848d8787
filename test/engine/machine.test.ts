// The session machine alone, with XState's own tooling: createActor, snapshot.can, emitted
// events, getPersistedSnapshot and restore with createActor(machine, { snapshot }).
import t from 'tap'
import { createActor, fromCallback } from 'xstate'
import {
  assertCan,
  IllegalMoveError,
  openingOf,
  sessionMachine,
  stateName,
  type GenerationInput,
  type SessionEmitted,
  type SessionEvent,
  type SessionInput,
} from '../../engine/machine.js'
import type { PendingTool } from '../../engine/types.js'

const T0 = 1_700_000_000_000

function input(overrides: Partial<SessionInput> = {}): SessionInput {
  return {
    sessionId: 's-1',
    accountId: 'acme',
    crewId: 'demo',
    agentId: 'general',
    agents: ['general', 'support', 'billing'],
    modifiers: { prefix: '» ', suffix: ' «', replacements: [{ from: 'Hi', to: 'Hello' }] },
    guardrails: [{ id: 'card', pattern: '\\b(?:\\d[ -]?){13,19}\\b', action: 'redact', appliesTo: 'both', replacement: '[card]' }],
    arguments: { name: 'Ana' },
    at: T0,
    idleTimeoutMs: 60_000,
    consumerId: 'c-1',
    ...overrides,
  }
}

/** Starts a session actor; collects what it emits. `generations` records each invoked generation. */
function start(opts: Partial<SessionInput> = {}, machine = sessionMachine) {
  const opening = openingOf(input(opts))
  const actor = createActor(machine, { input: { context: opening.context } })
  const log = [...opening.log]
  const published = [...opening.publish]
  actor.on('log', (e: Extract<SessionEmitted, { type: 'log' }>) => log.push(e.entry))
  actor.on('publish', (e: Extract<SessionEmitted, { type: 'publish' }>) => published.push(e.event))
  actor.start()
  /** Sends an event the way the host does: refused (thrown) when the machine would ignore it. */
  const send = (event: SessionEvent) => {
    assertCan(actor.getSnapshot(), event)
    actor.send(event)
  }
  return { actor, log, published, send, state: () => stateName(actor.getSnapshot()), ctx: () => actor.getSnapshot().context }
}

const at = (s: number) => T0 + s * 1000
const names = (events: { name: string }[]) => events.map(e => e.name)

t.test('a new session waits for the user', async t => {
  const s = start()
  t.equal(s.state(), 'active.idle')
  t.same(names(s.published), ['crew.status.waiting'])
  t.same(s.log.map(e => e.type), ['session.created'])
  t.equal(s.ctx().seq, 1)
  t.match(s.ctx().summary, /No messages yet/)
})

t.test('static outbound: first message with modifiers, then waiting', async t => {
  const s = start({ outbound: { type: 'static', parameters: { text: 'Hi Ana', applyModifiers: true } } })
  t.equal(s.state(), 'active.idle')
  t.same(names(s.published), ['assistant.message', 'crew.status.waiting'])
  t.equal(s.published[0]!.data.text, '» Hello Ana «')
  const plain = start({ outbound: { type: 'static', parameters: { text: 'Hi Ana' } } })
  t.equal(plain.published[0]!.data.text, 'Hi Ana', 'modifiers only on request')
})

t.test('dynamic outbound: whispered context, then the assistant speaks first', async t => {
  const s = start({
    outbound: { type: 'dynamic', parameters: { previousWhisperedMessages: [{ text: 'Customer owes 20 EUR', author: 'system' }] } },
  })
  t.equal(s.state(), 'active.generating')
  t.same(names(s.published), ['crew.status.writing'])
  t.equal(s.ctx().messages[0]!.text, 'Customer owes 20 EUR')
  s.send({ type: 'gen.completed', text: 'Hello Ana', toolCalls: [], at: at(1) })
  t.equal(s.state(), 'active.idle')
})

t.test('a user message turn: writing, the reply, waiting (its chunks are the generation\'s to stream)', async t => {
  const generations: GenerationInput[] = []
  const machine = sessionMachine.provide({
    actors: {
      generate: fromCallback<SessionEvent, GenerationInput>(({ input }) => {
        generations.push(input)
        return () => {}
      }),
    },
  })
  const s = start({}, machine)
  s.send({ type: 'user.message', text: 'hello', consumerId: 'c-1', at: at(1) })
  t.equal(s.state(), 'active.generating')
  t.equal(s.ctx().draft, null)
  s.send({ type: 'gen.writing', at: at(1) })
  t.same(s.ctx().draft, { messageId: generations[0]!.messageId }, 'writing: the reply in progress')
  s.send({ type: 'gen.completed', text: 'Hello', toolCalls: [], at: at(2) })
  t.equal(s.state(), 'active.idle')
  t.same(names(s.published), ['crew.status.waiting', 'crew.status.writing', 'assistant.message', 'crew.status.waiting'])
  const msg = s.published[2]!
  t.equal(generations[0]!.messageId, msg.data.messageId, 'the generation writes its chunks under the message\'s id')
  t.equal(msg.data.text, 'Hello')
  t.same(s.ctx().messages.map(m => [m.author, m.text]), [['user', 'hello'], ['assistant', 'Hello']])
  t.equal(s.ctx().idleDeadline, at(2) + 60_000, 'activity moves the idle deadline')
  t.match(s.ctx().summary, /1 user message\(s\), 1 assistant message\(s\)/)
})

t.test('a message sent while the assistant writes is answered right after', async t => {
  const s = start()
  s.send({ type: 'user.message', text: 'one', consumerId: 'c-1', at: at(1) })
  s.send({ type: 'user.message', text: 'two', consumerId: 'c-1', at: at(1) })
  t.equal(s.ctx().replyOwed, true)
  s.send({ type: 'gen.completed', text: 'to one', toolCalls: [], at: at(2) })
  t.equal(s.state(), 'active.generating', 'a second turn starts')
  t.equal(s.ctx().turnId, 2)
  s.send({ type: 'gen.completed', text: 'to two', toolCalls: [], at: at(3) })
  t.equal(s.state(), 'active.idle')
})

t.test('guardrails redact before the text enters the context', async t => {
  const s = start()
  s.send({ type: 'user.message', text: 'my card is 4111 1111 1111 1111', consumerId: 'c-1', at: at(1) })
  t.equal(s.ctx().messages[0]!.text, 'my card is [card]')
  t.ok(s.log.some(e => e.type === 'guardrail.triggered' && e.guardrail === 'card'))
})

const call = (over: Partial<PendingTool> = {}): PendingTool => ({ callId: 'call-1', tool: 'echo', args: { text: 'x' }, external: false, origin: 'turn', ...over })

t.test('tools in a turn: tooling, results, the same turn continues', async t => {
  const s = start()
  s.send({ type: 'user.message', text: 'echo x', consumerId: 'c-1', at: at(1) })
  s.send({ type: 'gen.completed', text: '', toolCalls: [call()], at: at(1) })
  t.equal(s.state(), 'active.tooling')
  t.equal(s.ctx().pendingTools.length, 1)
  s.send({ type: 'tool.result', callId: 'call-1', ok: true, result: { text: 'x' }, at: at(2) })
  t.equal(s.state(), 'active.generating')
  t.equal(s.ctx().turnId, 1, 'same turn')
  t.equal(s.ctx().toolRounds, 1)
  s.send({ type: 'gen.completed', text: 'echo said x', toolCalls: [], at: at(3) })
  t.equal(s.state(), 'active.idle')
  t.same(s.log.filter(e => e.type.startsWith('tool.')).map(e => e.type), ['tool.call', 'tool.result'])
  t.same(s.ctx().messages.map(m => m.author), ['user', 'assistant', 'tool', 'assistant'])
})

t.test('external tools wait for the resolver or their deadline', async t => {
  const s = start()
  s.send({ type: 'user.message', text: 'lookup 7', consumerId: 'c-1', at: at(1) })
  const ext = call({ callId: 'call-2', tool: 'crm_lookup', args: { customerId: '7' }, external: true, correlationId: 'corr-1', deadline: at(60) })
  s.send({ type: 'gen.completed', text: '', toolCalls: [ext], at: at(1) })
  t.equal(s.state(), 'active.tooling')
  t.throws(() => s.send({ type: 'external.resolve', correlationId: 'nope', result: {}, at: at(2) }), IllegalMoveError, 'unknown correlation refused')
  t.throws(() => s.send({ type: 'tool.expire', correlationId: 'corr-1', at: at(30) }), IllegalMoveError, 'not before its deadline')
  s.send({ type: 'external.resolve', correlationId: 'corr-1', result: { plan: 'gold' }, userId: 'crm', at: at(5) })
  t.equal(s.state(), 'active.generating')
  t.same(s.ctx().resolved, ['corr-1'])
  s.send({ type: 'gen.completed', text: 'gold', toolCalls: [], at: at(6) })

  s.send({ type: 'user.message', text: 'lookup 8', consumerId: 'c-1', at: at(7) })
  s.send({ type: 'gen.completed', text: '', toolCalls: [{ ...ext, callId: 'call-3', correlationId: 'corr-2', deadline: at(67) }], at: at(7) })
  s.send({ type: 'tool.expire', correlationId: 'corr-2', at: at(67) })
  t.equal(s.state(), 'active.generating', 'a timeout is a result too')
  t.match(s.log.at(-2), { type: 'tool.result', ok: false, via: 'timeout' })
})

t.test('pause and resume', async t => {
  const s = start()
  t.throws(() => s.send({ type: 'admin.resume', userId: 'sup', at: at(1) }), /admin.resume is not allowed while the session is active.idle/)
  s.send({ type: 'admin.pause', userId: 'sup', at: at(1) })
  t.equal(s.state(), 'paused')
  t.throws(() => s.send({ type: 'admin.pause', userId: 'sup', at: at(1) }), IllegalMoveError, 'already paused')
  t.throws(() => s.send({ type: 'admin.attend', userId: 'sup', at: at(1) }), IllegalMoveError, 'no replies while paused')
  s.send({ type: 'user.message', text: 'anyone?', consumerId: 'c-1', at: at(2) })
  t.equal(s.state(), 'paused', 'kept, not answered')
  t.notOk(names(s.published).includes('crew.status.writing'))
  s.send({ type: 'admin.impersonate', userId: 'sup', text: 'One moment', applyModifiers: false, at: at(3) })
  s.send({ type: 'admin.resume', userId: 'sup', at: at(4) })
  t.equal(s.state(), 'active.generating', 'the kept message is answered after resume')
  t.same(s.log.filter(e => e.userId === 'sup').map(e => e.type), ['session.paused', 'message.assistant', 'session.resumed'])

  const idle = start()
  idle.send({ type: 'admin.pause', userId: 'sup', at: at(1) })
  idle.send({ type: 'admin.resume', userId: 'sup', at: at(2) })
  t.equal(idle.state(), 'active.idle', 'nothing owed: back to waiting')
})

t.test('pause interrupts a reply in progress; resume produces it again', async t => {
  const generations: GenerationInput[] = []
  let stopped = 0
  const machine = sessionMachine.provide({
    actors: {
      generate: fromCallback<SessionEvent, GenerationInput>(({ input }) => {
        generations.push(input)
        return () => stopped++
      }),
    },
  })
  const s = start({}, machine)
  s.send({ type: 'user.message', text: 'hi', consumerId: 'c-1', at: at(1) })
  s.send({ type: 'gen.writing', at: at(1) })
  s.send({ type: 'admin.pause', userId: 'sup', at: at(2) })
  t.equal(stopped, 1, 'the generation was stopped')
  t.equal(s.ctx().draft, null)
  t.equal(s.log.find(e => e.type === 'session.paused')!.interruptedTurn, true, 'the log says a reply was cut short')
  t.throws(() => s.send({ type: 'gen.completed', text: 'late', toolCalls: [], at: at(3) }), IllegalMoveError, 'a late completion is refused')
  s.send({ type: 'admin.resume', userId: 'sup', at: at(4) })
  t.equal(generations.length, 2)
  t.equal(s.state(), 'active.generating')
})

t.test('transfer keeps the conversation under a new agent', async t => {
  const s = start()
  s.send({ type: 'user.message', text: 'billing please', consumerId: 'c-1', at: at(1) })
  s.send({ type: 'admin.transfer', userId: 'sup', target: 'billing', at: at(2) })
  t.equal(s.state(), 'active.generating', 'state kept')
  t.equal(s.ctx().agentId, 'billing')
  t.equal(s.ctx().messages.length, 1, 'conversation kept')
  t.match(s.published.at(-1), { name: 'session.transferred', data: { from: 'general', agentId: 'billing' } })
  t.throws(() => s.send({ type: 'admin.transfer', userId: 'sup', target: 'nobody', at: at(3) }), IllegalMoveError, 'unknown agent')
  t.throws(() => s.send({ type: 'admin.transfer', userId: 'sup', target: 'billing', at: at(3) }), IllegalMoveError, 'same agent')
  s.send({ type: 'admin.pause', userId: 'sup', at: at(4) })
  s.send({ type: 'admin.transfer', userId: 'sup', target: 'support', at: at(5) })
  t.equal(s.state(), 'paused', 'a paused session stays paused')
  t.equal(s.ctx().transfers, 2)
  t.match(s.ctx().summary, /Agent in charge: support/)
})

t.test('attend, whisper, impersonate, append, override, toolinject', async t => {
  const s = start()
  s.send({ type: 'admin.whisper', userId: 'sup', text: 'be kind', at: at(1) })
  t.equal(s.ctx().messages.at(-1)!.source, 'whisper')
  t.notOk(s.published.some(e => JSON.stringify(e).includes('be kind')), 'a whisper is never published')
  s.send({ type: 'admin.attend', userId: 'sup', at: at(2) })
  t.equal(s.state(), 'active.generating')
  t.throws(() => s.send({ type: 'admin.attend', userId: 'sup', at: at(2) }), IllegalMoveError, 'already replying')
  s.send({ type: 'gen.completed', text: 'Hi!', toolCalls: [], at: at(3) })
  s.send({ type: 'admin.impersonate', userId: 'sup', text: 'Hi from a human', applyModifiers: true, at: at(4) })
  t.match(s.published.at(-1), { name: 'assistant.message', data: { text: '» Hello from a human «' } })
  t.notOk('source' in s.published.at(-1)!.data, 'indistinguishable from a generated message')
  s.send({ type: 'admin.append', userId: 'sup', messages: [{ author: 'agent', text: 'noted' }], at: at(5) })
  t.equal(s.ctx().messages.length, 4)
  s.send({ type: 'admin.override', userId: 'sup', messages: [{ author: 'system', text: 'fresh start' }], arguments: { name: 'Bea' }, at: at(6) })
  t.same(s.ctx().messages.map(m => m.text), ['fresh start'])
  t.same(s.ctx().arguments, { name: 'Bea' })
  s.send({ type: 'admin.toolinject', userId: 'sup', call: call({ origin: 'inject' }), result: { text: 'x' }, ok: true, at: at(7) })
  t.equal(s.ctx().messages.at(-1)!.author, 'tool')
  s.send({ type: 'admin.toolinject', userId: 'sup', call: call({ callId: 'c9', external: true, correlationId: 'corr-9', deadline: at(100), origin: 'inject' }), at: at(8) })
  t.equal(s.ctx().pendingTools.length, 1)
  s.send({ type: 'external.resolve', correlationId: 'corr-9', result: 42, at: at(9) })
  t.equal(s.state(), 'active.idle', 'an injected tool does not start a turn')
  t.same(s.ctx().pendingTools, [])
})

t.test('destroy from active or paused; nothing after', async t => {
  for (const paused of [false, true]) {
    const s = start()
    if (paused) s.send({ type: 'admin.pause', userId: 'sup', at: at(1) })
    s.send({ type: 'session.destroy', reason: 'user_closed', by: 'channel', at: at(2) })
    t.equal(s.actor.getSnapshot().status, 'done')
    t.equal(s.state(), 'destroyed')
    t.match(s.published.at(-1), { name: 'session.closed', data: { reason: 'user_closed' } })
    t.throws(() => s.send({ type: 'user.message', text: 'hello?', consumerId: 'c-1', at: at(3) }), /not allowed while the session is destroyed/)
    t.throws(() => s.send({ type: 'admin.resume', userId: 'sup', at: at(3) }), IllegalMoveError)
  }
})

t.test('idle expiry is an absolute deadline', async t => {
  const s = start()
  t.throws(() => s.send({ type: 'session.expire', at: at(59) }), IllegalMoveError, 'not yet due')
  s.send({ type: 'session.expire', at: at(60) })
  t.equal(s.state(), 'destroyed')
  t.equal(s.ctx().closeReason, 'idle_timeout')
  t.equal(s.ctx().closedBy, 'system')
})

t.test('restore from a persisted snapshot', async t => {
  const s = start()
  s.send({ type: 'user.message', text: 'hello', consumerId: 'c-1', at: at(1) })
  s.send({ type: 'gen.completed', text: 'Hi', toolCalls: [], at: at(2) })
  s.send({ type: 'admin.pause', userId: 'sup', at: at(3) })
  const persisted = JSON.parse(JSON.stringify(s.actor.getPersistedSnapshot()))
  s.actor.stop()

  const restored = createActor(sessionMachine, { snapshot: persisted })
  const published: string[] = []
  restored.on('publish', (e: any) => published.push(e.event.name))
  restored.start()
  t.equal(stateName(restored.getSnapshot()), 'paused')
  t.equal(restored.getSnapshot().context.seq, s.ctx().seq)
  t.equal(restored.getSnapshot().context.idleDeadline, at(3) + 60_000, 'the deadline survives as an absolute time')
  restored.send({ type: 'session.restored', logPosition: s.ctx().seq + 2, at: at(10) })
  t.equal(restored.getSnapshot().context.seq, s.ctx().seq + 3, 'numbering continues after entries written past the snapshot')
  restored.send({ type: 'admin.resume', userId: 'sup', at: at(11) })
  t.equal(stateName(restored.getSnapshot()), 'active.idle')
  t.same(published, ['session.resumed', 'crew.status.waiting'])
})

t.test('restore in the middle of a reply invokes the generation again', async t => {
  const generations: GenerationInput[] = []
  const machine = sessionMachine.provide({
    actors: { generate: fromCallback<SessionEvent, GenerationInput>(({ input }) => void generations.push(input)) },
  })
  const s = start({}, machine)
  s.send({ type: 'user.message', text: 'hello', consumerId: 'c-1', at: at(1) })
  t.equal(generations.length, 1)
  const persisted = JSON.parse(JSON.stringify(s.actor.getPersistedSnapshot()))
  s.actor.stop()
  const restored = createActor(machine, { snapshot: persisted })
  restored.start()
  t.equal(stateName(restored.getSnapshot()), 'active.generating')
  t.equal(generations.length, 2, 'the generation restarted')
  t.equal(generations[1]!.messages.at(-1)!.text, 'hello')
  restored.send({ type: 'gen.completed', text: 'Hi', toolCalls: [], at: at(2) })
  t.equal(stateName(restored.getSnapshot()), 'active.idle')
})

t.test('assertCan names the state', async t => {
  const s = start()
  try {
    assertCan(s.actor.getSnapshot(), { type: 'admin.resume', userId: 'x', at: at(1) })
    t.fail('should throw')
  } catch (error) {
    t.ok(error instanceof IllegalMoveError)
    t.match(error, { event: 'admin.resume', state: 'active.idle' })
  }
})

t.test('a message taken during a reply comes after that reply in the context, and the next reply answers it', async t => {
  const generations: GenerationInput[] = []
  const machine = sessionMachine.provide({ actors: { generate: fromCallback<SessionEvent, GenerationInput>(({ input }) => void generations.push(input)) } })
  const s = start({ guardrails: [], modifiers: undefined }, machine)
  s.send({ type: 'user.message', text: 'first', consumerId: 'c-1', at: at(1) })
  s.send({ type: 'user.message', text: 'second', consumerId: 'c-1', at: at(2) }) // while the first reply is written
  s.send({ type: 'gen.completed', text: 'reply to first', toolCalls: [], at: at(3) })
  t.equal(s.state(), 'active.generating', 'a second reply is owed')
  t.same(s.ctx().messages.map(m => m.text), ['first', 'reply to first', 'second'], 'the reply sits where it was asked for, before what it did not see')
  t.equal(generations.at(-1)!.messages.at(-1)!.text, 'second', 'the next generation ends with the message it answers')
  s.send({ type: 'gen.completed', text: 'reply to second', toolCalls: [], at: at(4) })
  t.same(s.ctx().messages.map(m => m.text), ['first', 'reply to first', 'second', 'reply to second'])
  t.same(s.log.filter(e => e.type.startsWith('message.')).map(e => e.text), ['first', 'second', 'reply to first', 'reply to second'], 'the history keeps the order things happened in')
  t.match(s.ctx().digest, { users: 2, assistants: 2, lastUser: 'second', lastAssistant: 'reply to second' })
})

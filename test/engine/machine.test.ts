// The session machine alone, with XState's own tooling: createActor, snapshot.can, its named
// effects provided as recorders (machine.provide), persisted control and restore. The effects'
// own work (history entries, published events) is tested in session-effects.test.ts.
import t from 'tap'
import { createActor } from 'xstate'
import {
  assertCan,
  IllegalMoveError,
  initialContext,
  persistedControl,
  restoredSnapshot,
  SESSION_EFFECTS,
  sessionMachine,
  stateName,
  type SessionContext,
  type SessionEvent,
  type SessionTerms,
} from '../../engine/session/machine.js'
import type { PendingTool } from '../../engine/types.js'

const T0 = 1_700_000_000_000
const TERMS: SessionTerms = { agents: ['general', 'support', 'billing'], idleTimeoutMs: 60_000, maxToolRounds: 2 }
const at = (s: number) => T0 + s * 1000

/** A session actor whose effects are recorded (name, and the context each saw). */
function start(context: SessionContext = initialContext(TERMS, 'general', T0), restored?: ReturnType<typeof persistedControl>) {
  const effects: { name: string; context: SessionContext; event: string }[] = []
  const machine = sessionMachine.provide({
    actions: Object.fromEntries(SESSION_EFFECTS.map(name => [name, ({ context, event }: { context: SessionContext; event: SessionEvent }) => void effects.push({ name, context, event: event.type })])) as any,
  })
  const actor = restored ? createActor(machine, { snapshot: restoredSnapshot(machine, restored), input: restored.context }) : createActor(machine, { input: context })
  actor.start()
  let seen = 0
  return {
    actor,
    effects,
    /** Sends an event the way the host does: refused (thrown) when the machine would ignore it. */
    send(event: SessionEvent) {
      assertCan(actor.getSnapshot(), event)
      actor.send(event)
    },
    /** The effects run since the last call. */
    did() {
      const names = effects.slice(seen).map(e => e.name)
      seen = effects.length
      return names
    },
    state: () => stateName(actor.getSnapshot()),
    ctx: () => actor.getSnapshot().context,
  }
}

const userMessage = (s: number, text = 'hello'): SessionEvent => ({ type: 'user.message', text, consumerId: 'c1', at: at(s) })
const completed = (s: number, toolCalls: PendingTool[] = []): SessionEvent => ({ type: 'gen.completed', text: 'reply', toolCalls, at: at(s) })

t.test('a new session waits for the user; one that owes a reply starts its first turn', async t => {
  const s = start()
  t.equal(s.state(), 'active.idle')
  t.same(s.did(), ['announceWaiting'])
  t.match(s.ctx(), { turnId: 0, replyOwed: false, idleDeadline: T0 + 60_000 })

  const outbound = start(initialContext(TERMS, 'general', T0, true))
  t.equal(outbound.state(), 'active.generating')
  t.same(outbound.did(), ['startTurn'])
  t.match(outbound.ctx(), { turnId: 1, round: 0, replyOwed: false })
})

t.test('a turn: the message is recorded, the turn starts, the reply ends it, the session waits again', async t => {
  const s = start()
  s.did()
  s.send(userMessage(1))
  t.equal(s.state(), 'active.generating')
  t.same(s.did(), ['recordUserMessage', 'startTurn'])
  t.match(s.ctx(), { turnId: 1, replyOwed: false, idleDeadline: at(1) + 60_000 })
  s.send(completed(2))
  t.equal(s.state(), 'active.idle')
  t.same(s.did(), ['stopTurn', 'recordReply', 'announceWaiting'], 'leaving generating stops the generation, then the reply is recorded')
  t.match(s.ctx(), { turnId: 1, round: 0, idleDeadline: at(2) + 60_000 })
  // The reply's effect saw the turn it ends.
  t.equal(s.effects.find(e => e.name === 'recordReply')!.context.turnId, 1)
})

t.test('a message sent while the assistant writes is answered by the next turn, right after', async t => {
  const s = start()
  s.send(userMessage(1, 'first'))
  s.send(userMessage(2, 'second'))
  t.equal(s.state(), 'active.generating')
  t.equal(s.ctx().replyOwed, true)
  s.did()
  s.send(completed(3))
  t.equal(s.state(), 'active.generating', 'straight into the next turn')
  t.same(s.did(), ['stopTurn', 'recordReply', 'startTurn'])
  t.match(s.ctx(), { turnId: 2, replyOwed: false })
  s.send({ type: 'gen.failed', error: 'down', at: at(4) })
  t.equal(s.state(), 'active.idle')
  t.same(s.did(), ['stopTurn', 'recordFailure', 'announceWaiting'])
})

t.test('tools in a turn: tooling, results, the same turn continues in its next round', async t => {
  const s = start()
  s.send(userMessage(1, 'echo hi'))
  const call: PendingTool = { callId: 'call_1', tool: 'echo', args: { text: 'hi' }, external: false, origin: 'turn' }
  s.did()
  s.send(completed(2, [call]))
  t.equal(s.state(), 'active.tooling')
  t.same(s.did(), ['stopTurn', 'recordToolRequest', 'runTools'])
  t.same(s.ctx().pendingTools.map(p => [p.callId, p.origin]), [['call_1', 'turn']])
  s.send({ type: 'tool.result', callId: 'call_1', result: { text: 'hi' }, ok: true, at: at(3) })
  t.equal(s.state(), 'active.generating', 'every turn tool answered: the turn goes on')
  t.same(s.did(), ['recordToolResult', 'startTurn'])
  t.match(s.ctx(), { turnId: 1, round: 1, pendingTools: [] })
  t.equal(s.effects.at(-1)!.context.round, 1, 'its next round')
})

t.test('external tools wait for the resolver or their deadline; a late duplicate is told apart', async t => {
  const s = start()
  s.send(userMessage(1, 'lookup 7'))
  const call = (id: string): PendingTool => ({ callId: `call_${id}`, tool: 'crm_lookup', args: {}, external: true, correlationId: id, deadline: at(10), origin: 'turn' })
  s.send(completed(2, [call('a'), call('b')]))
  t.equal(s.state(), 'active.tooling')
  t.throws(() => s.send({ type: 'tool.expire', correlationId: 'a', at: at(5) }), IllegalMoveError, 'not before its deadline')
  s.send({ type: 'external.resolve', correlationId: 'a', result: { name: 'Ana' }, at: at(6) })
  t.equal(s.state(), 'active.tooling', 'one still pending')
  t.same(s.ctx().resolved, ['a'])
  t.throws(() => s.send({ type: 'external.resolve', correlationId: 'a', result: {}, at: at(7) }), IllegalMoveError, 'a second result for the same call is refused')
  s.send({ type: 'tool.expire', correlationId: 'b', at: at(10) })
  t.equal(s.state(), 'active.generating', 'the deadline answered the other')
  t.match(s.ctx(), { round: 1, pendingTools: [], resolved: ['a', 'b'] })
})

t.test('pause and resume: nothing generated while paused, messages kept and answered after', async t => {
  const s = start()
  s.did()
  s.send({ type: 'admin.pause', userId: 'sup', at: at(1) })
  t.equal(s.state(), 'paused')
  t.same(s.did(), ['recordPause'])
  t.throws(() => s.send({ type: 'admin.pause', userId: 'sup', at: at(2) }), /admin.pause is not allowed while the session is paused/)
  t.throws(() => s.send({ type: 'admin.attend', userId: 'sup', at: at(2) }), IllegalMoveError)
  s.send(userMessage(3))
  t.equal(s.state(), 'paused')
  t.same(s.did(), ['recordUserMessage'])
  t.equal(s.ctx().replyOwed, true)
  s.send({ type: 'admin.resume', userId: 'sup', at: at(4) })
  t.equal(s.state(), 'active.generating')
  t.same(s.did(), ['recordResume', 'startTurn'])
  t.match(s.ctx(), { turnId: 1, replyOwed: false })
  s.send(completed(5))
  s.send({ type: 'admin.pause', userId: 'sup', at: at(6) })
  s.did()
  s.send({ type: 'admin.resume', userId: 'sup', at: at(7) })
  t.equal(s.state(), 'active.idle', 'nothing owed: back to waiting')
  t.same(s.did(), ['recordResume', 'announceWaiting'])
})

t.test('pause cuts a reply in progress (the generation stops); resume writes it again in a new turn', async t => {
  const s = start()
  s.send(userMessage(1))
  s.did()
  s.send({ type: 'admin.pause', userId: 'sup', at: at(2) })
  t.equal(s.state(), 'paused')
  t.same(s.did(), ['stopTurn', 'recordPause'])
  t.match(s.ctx(), { replyOwed: true, round: 0 })
  s.send({ type: 'admin.resume', userId: 'sup', at: at(3) })
  t.equal(s.state(), 'active.generating')
  t.equal(s.ctx().turnId, 2)
})

t.test('transfer keeps the conversation under a known agent, from any live state', async t => {
  const s = start()
  t.throws(() => s.send({ type: 'admin.transfer', userId: 'sup', target: 'nobody', at: at(1) }), IllegalMoveError, 'an agent of another crew')
  t.throws(() => s.send({ type: 'admin.transfer', userId: 'sup', target: 'general', at: at(1) }), IllegalMoveError, 'the agent already in charge')
  s.did()
  s.send({ type: 'admin.transfer', userId: 'sup', target: 'billing', at: at(2) })
  t.same(s.did(), ['recordTransfer'])
  t.match(s.ctx(), { agentId: 'billing', transfers: 1, idleDeadline: at(2) + 60_000 })
  s.send({ type: 'admin.pause', userId: 'sup', at: at(3) })
  s.send({ type: 'admin.transfer', userId: 'sup', target: 'support', at: at(4) })
  t.match(s.ctx(), { agentId: 'support', transfers: 2 })
  t.equal(s.state(), 'paused')
})

t.test('supervisor context changes and injected tools are taken in any live state', async t => {
  const s = start()
  s.send(userMessage(1))
  s.did()
  s.send({ type: 'admin.whisper', userId: 'sup', text: 'be brief', at: at(2) })
  s.send({ type: 'admin.append', userId: 'sup', messages: [{ author: 'system', text: 'VIP' }], at: at(2) })
  s.send({ type: 'admin.override', userId: 'sup', messages: [], at: at(2) })
  s.send({ type: 'admin.impersonate', userId: 'sup', text: 'one moment', applyModifiers: false, at: at(2) })
  t.same(s.did(), ['recordWhisper', 'recordAppend', 'recordOverride', 'recordImpersonation'])
  t.equal(s.state(), 'active.generating', 'the turn goes on')
  const injected: PendingTool = { callId: 'call_x', tool: 'crm_lookup', args: {}, external: true, correlationId: 'x', deadline: at(60), origin: 'inject' }
  s.send({ type: 'admin.toolinject', userId: 'sup', call: injected, at: at(3) })
  t.same(s.ctx().pendingTools.map(p => [p.callId, p.origin, p.userId]), [['call_x', 'inject', 'sup']])
  s.send({ type: 'external.resolve', correlationId: 'x', result: 1, at: at(4) })
  t.same(s.ctx().pendingTools, [])
  t.equal(s.ctx().idleDeadline, at(4) + 60_000, 'an injected call`s result is activity')
})

t.test('destroy from active or paused; nothing after', async t => {
  for (const pausedFirst of [false, true]) {
    const s = start()
    if (pausedFirst) s.send({ type: 'admin.pause', userId: 'sup', at: at(1) })
    s.send({ type: 'session.destroy', reason: 'user_closed', by: 'channel', at: at(2) })
    t.equal(s.actor.getSnapshot().status, 'done')
    t.same(s.ctx().closed, { reason: 'user_closed', by: 'channel' })
    t.throws(() => s.send(userMessage(3)), /is not allowed while the session is destroyed/)
  }
})

t.test('idle expiry is an absolute deadline, pushed out by activity', async t => {
  const s = start()
  t.throws(() => s.send({ type: 'session.expire', at: at(59) }), IllegalMoveError, 'not before it')
  s.send(userMessage(30))
  s.send(completed(31))
  t.throws(() => s.send({ type: 'session.expire', at: at(61) }), IllegalMoveError, 'the message pushed it out')
  s.send({ type: 'session.expire', at: at(91) })
  t.same(s.ctx().closed, { reason: 'idle_timeout', by: 'system' })
  t.equal(s.actor.getSnapshot().status, 'done')
})

t.test('the persisted control: between turns as it is; a reply in progress kept as owed, and a restore answers it', async t => {
  const s = start()
  s.send(userMessage(1))
  s.send(completed(2))
  t.same(persistedControl(s.actor.getSnapshot()), { value: { active: 'idle' }, context: s.ctx() })
  s.send(userMessage(3))
  const control = JSON.parse(JSON.stringify(persistedControl(s.actor.getSnapshot())))
  t.match(control, { value: { active: 'idle' }, context: { turnId: 2, replyOwed: true, round: 0 } })

  const restored = start(undefined, control)
  t.equal(restored.state(), 'active.idle')
  t.same(restored.did(), [], 'a restore runs no entry effect again (no second crew.status.waiting)')
  restored.send({ type: 'admin.attend', userId: 'system:restore', at: at(4) })
  t.equal(restored.state(), 'active.generating')
  t.equal(restored.ctx().turnId, 3)

  const pausedControl = (() => {
    const p = start()
    p.send({ type: 'admin.pause', userId: 'sup', at: at(1) })
    return JSON.parse(JSON.stringify(persistedControl(p.actor.getSnapshot())))
  })()
  const paused = start(undefined, pausedControl)
  t.equal(paused.state(), 'paused')
  paused.send({ type: 'admin.resume', userId: 'sup', at: at(2) })
  t.equal(paused.state(), 'active.idle')
})

t.test('a user message is taken in every live state; assertCan names the state it refused in', async t => {
  const s = start()
  t.ok(s.actor.getSnapshot().can(userMessage(1)), 'idle')
  s.send(userMessage(1))
  t.ok(s.actor.getSnapshot().can(userMessage(2)), 'generating')
  s.send(completed(2, [{ callId: 'c', tool: 'crm_lookup', args: {}, external: true, correlationId: 'k', deadline: at(99), origin: 'turn' }]))
  t.ok(s.actor.getSnapshot().can(userMessage(3)), 'tooling')
  s.send({ type: 'admin.pause', userId: 'sup', at: at(3) })
  t.ok(s.actor.getSnapshot().can(userMessage(4)), 'paused')
  try {
    s.send({ type: 'admin.attend', userId: 'sup', at: at(5) })
    t.fail('refused')
  } catch (error) {
    t.ok(error instanceof IllegalMoveError)
    t.match(error, { event: 'admin.attend', state: 'paused' })
  }
})

// What a session's transitions write and publish (engine/session/session-effects.ts), with the real
// machine and conversation, and the property a restore rests on: a checkpoint plus the history
// written after it rebuilds the session it was taken of (engine/persistence/session-restore.ts).
import t from 'tap'
import fc from 'fast-check'
import { persistedControl, type SessionEvent } from '../../engine/session/machine.js'
import { rebuild } from '../../engine/persistence/session-restore.js'
import type { PendingTool } from '../../engine/types.js'
import { effectSession, T0 } from './fixtures/effect-session.js'

const at = (s: number) => T0 + s * 1000
const names = (events: { name: string }[]) => events.map(e => e.name)

t.test('a new session: session.created, then waiting', async t => {
  const s = effectSession({ arguments: { name: 'Ana' } })
  t.equal(s.state(), 'active.idle')
  t.same(s.log.map(e => [e.seq, e.type]), [[1, 'session.created']])
  t.match(s.log[0], { crewId: 'demo', agentId: 'general', consumerId: 'c-1', arguments: { name: 'Ana' } })
  t.same(names(s.published), ['crew.status.waiting'])
  t.match(s.conversation.summary('general'), /No messages yet/)
})

t.test('static outbound: the first message with the crew`s modifiers, in the conversation, then waiting', async t => {
  const s = effectSession({ outbound: { type: 'static', parameters: { text: 'Hi Ana', applyModifiers: true } } })
  t.same(names(s.published), ['assistant.message', 'crew.status.waiting'])
  t.equal(s.published[0]!.data.text, 'Hello Ana 🙂')
  t.same(s.conversation.window.map(m => [m.id, m.author, m.source]), [['m2', 'assistant', 'outbound']])
  const plain = effectSession({ outbound: { type: 'static', parameters: { text: 'Hi Ana' } } })
  t.equal(plain.published[0]!.data.text, 'Hi Ana', 'modifiers only on request')
})

t.test('dynamic outbound: whispered context, then the assistant speaks first', async t => {
  const s = effectSession({ outbound: { type: 'dynamic', parameters: { previousWhisperedMessages: [{ text: 'Customer owes 20 EUR', author: 'system' }] } } })
  t.equal(s.state(), 'active.generating')
  t.same(names(s.published), ['crew.status.writing'])
  t.same(s.log.map(e => e.type), ['session.created', 'context.appended', 'turn.started'])
  t.match(s.log[2], { at: T0, turnId: 1, round: 0 }, 'the first turn, at the clock`s time (no event gave one)')
  t.same(s.conversation.window.map(m => m.text), ['Customer owes 20 EUR'])
})

t.test('a turn: message, turn, reply; the reply and its events carry the turn`s id', async t => {
  const s = effectSession()
  s.send({ type: 'user.message', text: 'hello', consumerId: 'c-1', at: at(1) })
  s.send({ type: 'gen.completed', text: 'Hi there', toolCalls: [], at: at(2) })
  t.same(s.log.slice(1).map(e => [e.seq, e.type]), [[2, 'message.user'], [3, 'turn.started'], [4, 'message.assistant']])
  t.match(s.log[3], { source: 'generated', messageId: 't1.0', turnId: 1, agentId: 'general', text: 'Hi there', at: at(2) })
  t.same(names(s.published), ['crew.status.waiting', 'crew.status.writing', 'assistant.message', 'crew.status.waiting'])
  t.match(s.published[2]!.data, { sessionId: 's-1', messageId: 't1.0', turnId: 1, text: 'Hi there', at: at(2) })
  t.same(s.conversation.window.map(m => [m.id, m.author]), [['m2', 'user'], ['t1.0', 'assistant']])
  t.equal(s.live.seq, 4)
  t.equal(s.live.updatedAt, at(2))
})

t.test('guardrails redact before the text enters the history and the context, and say so', async t => {
  const s = effectSession()
  s.send({ type: 'user.message', text: 'my card is 4111 1111 1111 1111', consumerId: 'c-1', at: at(1) })
  t.match(s.log[1], { type: 'message.user', text: 'my card is [card number removed]' })
  t.match(s.log[2], { type: 'guardrail.triggered', guardrail: 'card-number', messageSeq: 2, side: 'user' })
  t.equal(s.conversation.window.at(-1)!.text, 'my card is [card number removed]')
  s.send({ type: 'gen.completed', text: 'Noted 4111-1111-1111-1111 and another 4111 1111 1111 1111', toolCalls: [], at: at(2) })
  t.match(s.log.find(e => e.type === 'message.assistant'), { text: 'Noted [card number removed]and another [card number removed]' }, 'every match, on the assistant side too')
  s.send({ type: 'user.message', text: 'no card here', consumerId: 'c-1', at: at(3) })
  t.equal(s.log.filter(e => e.type === 'guardrail.triggered').length, 2, 'a compiled pattern starts afresh each time')
})

t.test('a message taken while a reply is written comes after that reply in the context; the next reply answers it', async t => {
  const s = effectSession()
  s.send({ type: 'user.message', text: 'first', consumerId: 'c-1', at: at(1) })
  s.send({ type: 'user.message', text: 'second', consumerId: 'c-1', at: at(2) })
  s.send({ type: 'gen.completed', text: 'answer to first', toolCalls: [], at: at(3) })
  t.same(s.conversation.window.map(m => m.text), ['first', 'answer to first', 'second'])
  t.same(s.log.slice(1).map(e => e.type), ['message.user', 'turn.started', 'message.user', 'message.assistant', 'turn.started'], 'the history keeps the order things happened in')
  s.send({ type: 'gen.completed', text: 'answer to second', toolCalls: [], at: at(4) })
  t.same(s.conversation.window.map(m => m.text), ['first', 'answer to first', 'second', 'answer to second'])
})

t.test('tools: the request, each call, each result; an injected builtin and an external one', async t => {
  const s = effectSession()
  s.send({ type: 'user.message', text: 'echo hi', consumerId: 'c-1', at: at(1) })
  const call: PendingTool = { callId: 'call_1', tool: 'echo', args: { text: 'hi' }, external: false, origin: 'turn' }
  s.send({ type: 'gen.completed', text: '', toolCalls: [call], at: at(2) })
  s.send({ type: 'tool.result', callId: 'call_1', result: { text: 'hi' }, ok: true, at: at(3) })
  const types = s.log.slice(1).map(e => e.type)
  t.same(types, ['message.user', 'turn.started', 'message.assistant', 'tool.call', 'tool.result', 'turn.continued'])
  t.match(s.log.find(e => e.type === 'message.assistant'), { toolCalls: [{ callId: 'call_1', tool: 'echo', args: { text: 'hi' } }] })
  t.match(s.log.find(e => e.type === 'tool.result'), { callId: 'call_1', ok: true, result: { text: 'hi' }, origin: 'turn', via: 'handler' })
  t.same(s.conversation.window.map(m => m.author), ['user', 'assistant', 'tool'])
  t.same(s.conversation.window[1]!.toolCalls, [{ callId: 'call_1', tool: 'echo', args: { text: 'hi' } }], 'the call, with its arguments, in the context')

  s.send({ type: 'gen.completed', text: 'echoed', toolCalls: [], at: at(4) })
  s.send({ type: 'admin.toolinject', userId: 'sup', call: { callId: 'call_2', tool: 'echo', args: { text: 'x' }, external: false, origin: 'inject' }, result: { text: 'x' }, ok: true, at: at(5) })
  t.match(s.log.slice(-2), [{ type: 'tool.call', origin: 'inject', userId: 'sup' }, { type: 'tool.result', via: 'handler', userId: 'sup' }])
  t.equal(s.conversation.window.at(-1)!.userId, 'sup', 'a supervisor`s call is told apart from the assistant`s in the context')
  const external: PendingTool = { callId: 'call_3', tool: 'crm_lookup', args: { customerId: '7' }, external: true, correlationId: 'k', deadline: at(60), origin: 'inject' }
  s.send({ type: 'admin.toolinject', userId: 'sup', call: external, at: at(6) })
  s.send({ type: 'tool.expire', correlationId: 'k', at: at(60) })
  t.match(s.log.at(-1), { type: 'tool.result', correlationId: 'k', ok: false, via: 'timeout', result: { error: 'timeout' } })
})

t.test('supervisor actions: whisper hidden, impersonation shown as the assistant, append and override, transfer', async t => {
  const s = effectSession({ arguments: { plan: 'basic' } })
  s.send({ type: 'admin.whisper', userId: 'sup', text: 'VIP customer', at: at(1) })
  t.same(names(s.published), ['crew.status.waiting'], 'a whisper is never published')
  t.match(s.conversation.window.at(-1), { author: 'system', source: 'whisper', userId: 'sup' })
  s.send({ type: 'admin.impersonate', userId: 'sup', text: 'Hi, one moment', applyModifiers: true, at: at(2) })
  t.match(s.published.at(-1), { name: 'assistant.message', data: { text: 'Hello, one moment 🙂', messageId: 'm3' } })
  s.send({ type: 'admin.append', userId: 'sup', messages: [{ author: 'system', text: 'note' }], at: at(3) })
  t.equal(s.conversation.window.at(-1)!.id, 'm4.0')
  s.send({ type: 'admin.override', userId: 'sup', messages: [{ author: 'user', text: 'only this' }], arguments: { plan: 'gold' }, at: at(4) })
  t.same(s.conversation.window.map(m => m.text), ['only this'])
  t.same(s.conversation.arguments, { plan: 'gold' })
  s.send({ type: 'admin.transfer', userId: 'sup', target: 'billing', reason: 'invoice', at: at(5) })
  t.match(s.log.at(-1), { type: 'agent.transferred', from: 'general', to: 'billing', reason: 'invoice' })
  t.match(s.published.at(-1), { name: 'session.transferred', data: { from: 'general', agentId: 'billing' } })
  t.match(s.conversation.summary(s.ctx().agentId), /Agent in charge: billing\./)
})

t.test('destroy: its entry and session.closed (the host holds the notice until the close is written)', async t => {
  const s = effectSession()
  s.send({ type: 'session.destroy', reason: 'user_closed', by: 'channel', at: at(1) })
  t.match(s.log.at(-1), { type: 'session.destroyed', reason: 'user_closed', by: 'channel' })
  t.match(s.published.at(-1), { name: 'session.closed', data: { reason: 'user_closed' } })
})

// ------------------------------------------------------------------ restore rests on this

type Step = { kind: 'user'; text: string } | { kind: 'reply'; text: string } | { kind: 'whisper' | 'append' | 'pause' | 'resume' | 'transfer' | 'tools' | 'result' | 'override' }
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('user' as const), text: fc.string({ maxLength: 80 }) }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('reply' as const), text: fc.string({ maxLength: 80 }) }) },
  fc.record({ kind: fc.constantFrom('whisper' as const, 'append' as const, 'pause' as const, 'resume' as const, 'transfer' as const, 'tools' as const, 'result' as const, 'override' as const) }),
)

t.test('a checkpoint taken at any point, plus the history written after it, rebuilds the session: conversation and control', async t => {
  await fc.assert(
    fc.property(fc.array(step, { maxLength: 80 }), fc.nat(), (steps, cut) => {
      const s = effectSession()
      const checkpointAt = cut % (steps.length + 1)
      let checkpoint: ReturnType<typeof takeCheckpoint> | null = null
      const takeCheckpoint = () => ({
        control: JSON.parse(JSON.stringify(persistedControl(s.actor.getSnapshot()))),
        conversation: JSON.parse(JSON.stringify(s.conversation.state())),
        logPosition: s.live.seq,
        createdAt: T0,
        updatedAt: s.live.updatedAt,
      })
      steps.forEach((step, i) => {
        if (i === checkpointAt) checkpoint = takeCheckpoint()
        const event = eventOf(step, s.ctx(), T0 + i + 1)
        if (event && s.actor.getSnapshot().can(event)) s.send(event)
      })
      checkpoint ??= takeCheckpoint()
      const control = JSON.parse(JSON.stringify(persistedControl(s.actor.getSnapshot())))
      const persisted = { accountId: 'a', crewId: 'demo', consumers: [], eventSeq: 0, eventSeqBound: 0, checkpoint, control: { seq: s.live.seq, control } }
      const after = s.log.filter(e => e.seq > checkpoint!.logPosition).map(e => JSON.parse(JSON.stringify(e)))
      const rebuilt = rebuild(persisted, after)
      const live = JSON.parse(JSON.stringify(s.conversation.state()))
      const again = JSON.parse(JSON.stringify(rebuilt.conversation.state()))
      if (JSON.stringify(again) !== JSON.stringify(live)) throw new Error(`conversation differs:\n${JSON.stringify(again)}\n${JSON.stringify(live)}`)
      if (JSON.stringify(rebuilt.control) !== JSON.stringify(control)) throw new Error('control differs')
      if (rebuilt.seq !== s.live.seq) throw new Error(`seq ${rebuilt.seq} != ${s.live.seq}`)
    }),
    { numRuns: 300 },
  )
  t.pass('300 random conversations')
})

t.test('a user message the journal holds past its control record leaves a reply owed', async t => {
  const s = effectSession()
  s.send({ type: 'user.message', text: 'one', consumerId: 'c-1', at: at(1) })
  s.send({ type: 'gen.completed', text: 'reply', toolCalls: [], at: at(2) })
  const checkpoint = { control: persistedControl(s.actor.getSnapshot()), conversation: s.conversation.state(), logPosition: s.live.seq, createdAt: T0, updatedAt: at(2) }
  const control = { seq: s.live.seq, control: persistedControl(s.actor.getSnapshot()) }
  s.send({ type: 'user.message', text: 'two', consumerId: 'c-1', at: at(3) })
  // The entries of that message were committed, its batch's control record was not (MongoDB wrote part of a bulk write).
  const rebuilt = rebuild({ accountId: 'a', crewId: 'demo', consumers: [], eventSeq: 0, eventSeqBound: 0, checkpoint, control }, s.log.filter(e => e.seq > checkpoint.logPosition))
  t.equal(rebuilt.control.context.replyOwed, true, 'answered after the restore')
  t.equal(rebuilt.conversation.window.at(-1)!.text, 'two')
})

/** The event a random step stands for, in the session's current state (undefined: none). */
function eventOf(step: Step, context: ReturnType<ReturnType<typeof effectSession>['ctx']>, now: number): SessionEvent | undefined {
  switch (step.kind) {
    case 'user':
      return { type: 'user.message', text: step.text, consumerId: 'c-1', at: now }
    case 'reply':
      return { type: 'gen.completed', text: step.text, toolCalls: [], at: now }
    case 'whisper':
      return { type: 'admin.whisper', userId: 'sup', text: 'note', at: now }
    case 'append':
      return { type: 'admin.append', userId: 'sup', messages: [{ author: 'system', text: 'ctx' }], at: now }
    case 'override':
      return { type: 'admin.override', userId: 'sup', messages: [{ author: 'user', text: 'reset' }], arguments: { n: now }, at: now }
    case 'pause':
      return { type: 'admin.pause', userId: 'sup', at: now }
    case 'resume':
      return { type: 'admin.resume', userId: 'sup', at: now }
    case 'transfer':
      return { type: 'admin.transfer', userId: 'sup', target: context.agentId === 'general' ? 'billing' : 'general', at: now }
    case 'tools':
      return { type: 'gen.completed', text: '', toolCalls: [{ callId: `call_${now}`, tool: 'crm_lookup', args: {}, external: true, correlationId: `k${now}`, deadline: now + 60_000, origin: 'turn' }], at: now }
    case 'result': {
      const pending = context.pendingTools[0]
      return pending?.correlationId ? { type: 'external.resolve', correlationId: pending.correlationId, result: { ok: now }, at: now } : undefined
    }
  }
}

// A session's memory does not grow with its conversation: the context keeps a recent window
// (what the assistant is given), the summary is kept up to date from a digest of the whole
// conversation, and the whole conversation stays in the history log.
import t from 'tap'
import fc from 'fast-check'
import { CONTEXT_WINDOW_MESSAGES, digestAdd, digestOf, emptyDigest, summarize, summarizeDigest, SUMMARY_NOTES } from '../../engine/session/conversation.js'
import type { ConversationMessage } from '../../engine/types.js'
import { effectSession, T0 } from './fixtures/effect-session.js'

/** The summary as it was computed before the digest: from the whole list of messages (the reference). */
function wholeListSummary(messages: ConversationMessage[], agentId: string): string {
  const clip = (text: string, max = 160) => (text.length > max ? `${text.slice(0, max - 1)}…` : text)
  const visible = messages.filter(m => m.source !== 'whisper' && m.author !== 'tool')
  if (visible.length === 0) return `No messages yet. Agent in charge: ${agentId}.`
  const users = visible.filter(m => m.author === 'user')
  const assistants = visible.filter(m => m.author === 'assistant' || m.author === 'agent')
  const tools = messages.filter(m => m.author === 'tool').map(m => m.tool)
  const parts = [`${users.length} user message(s), ${assistants.length} assistant message(s).`]
  if (users[0]) parts.push(`User opened with: "${clip(users[0].text)}".`)
  if (users.length > 1) parts.push(`Last user message: "${clip(users.at(-1)!.text)}".`)
  if (assistants.length) parts.push(`Last assistant reply: "${clip(assistants.at(-1)!.text)}".`)
  if (tools.length) parts.push(`Tools used: ${[...new Set(tools)].join(', ')}.`)
  const whispers = messages.filter(m => m.source === 'whisper')
  if (whispers.length) parts.push(`Supervisor notes: ${whispers.map(w => `"${clip(w.text, 80)}"`).join('; ')}.`)
  parts.push(`Agent in charge: ${agentId}.`)
  return parts.join(' ')
}

const message = fc.oneof(
  fc.record({ author: fc.constant('user' as const), source: fc.constant('user' as const), text: fc.string({ maxLength: 200 }) }),
  fc.record({ author: fc.constantFrom('assistant' as const, 'agent' as const), source: fc.constantFrom('generated' as const, 'context' as const), text: fc.string({ maxLength: 200 }) }),
  fc.record({ author: fc.constant('system' as const), source: fc.constantFrom('whisper' as const, 'context' as const), text: fc.string({ maxLength: 120 }) }),
  fc.record({ author: fc.constant('tool' as const), source: fc.constant('tool' as const), text: fc.string({ maxLength: 20 }), tool: fc.constantFrom('echo', 'crm_lookup', 'clock') }),
)

t.test('the summary kept from the digest, message by message, is the one computed from the whole conversation', async t => {
  fc.assert(
    fc.property(fc.array(message, { maxLength: 80 }), fc.constantFrom('general', 'support'), (drafts, agentId) => {
      const messages = drafts.map((m, i) => ({ id: `m${i}`, at: T0, ...m })) as ConversationMessage[]
      // Only the last SUMMARY_NOTES supervisor notes are kept in the summary (they were unbounded).
      fc.pre(messages.filter(m => m.source === 'whisper').length <= SUMMARY_NOTES)
      const incremental = messages.reduce(digestAdd, emptyDigest())
      t.equal(summarizeDigest(incremental, agentId), wholeListSummary(messages, agentId))
      t.equal(summarize(messages, agentId), wholeListSummary(messages, agentId))
      t.equal(incremental.total, messages.length)
      t.same(incremental, digestOf(messages))
    }),
    { numRuns: 300 },
  )
})

t.test('a long conversation: the context keeps a bounded window; counts, summary and the history log cover all of it', async t => {
  const s = effectSession({ crew: { ...effectSession().live.crew, guardrails: [] } })
  const turns = 400
  let persistedSize = 0
  for (let i = 0; i < turns; i++) {
    s.send({ type: 'user.message', text: `question ${i} ${'x'.repeat(100)}`, consumerId: 'c-1', at: T0 + i })
    s.send({ type: 'gen.completed', text: `answer ${i}`, toolCalls: [], at: T0 + i })
    if (i === 99) persistedSize = JSON.stringify(s.conversation.state()).length
    if (i % 50 === 0) s.send({ type: 'admin.whisper', userId: 'sup', text: `note ${i}`, at: T0 + i })
  }
  const window = s.conversation.window
  t.ok(window.length <= CONTEXT_WINDOW_MESSAGES, `the context holds ${window.length} messages`)
  t.equal(window.at(-1)!.text, `answer ${turns - 1}`, 'the most recent messages are kept')
  t.equal(s.conversation.total, turns * 2 + 8, 'every message is counted')
  const summary = s.conversation.summary('general')
  t.match(summary, new RegExp(`^${turns} user message\\(s\\), ${turns} assistant message\\(s\\)\\. User opened with: "question 0 `))
  t.match(summary, /Supervisor notes: "note 0"; .*"note 350"\./)
  const size = JSON.stringify(s.conversation.state()).length
  t.ok(size < persistedSize * 1.1, `what a checkpoint keeps does not grow with the conversation (${persistedSize} B after 100 turns, ${size} B after ${turns})`)
  t.equal(s.log.filter(e => e.type === 'message.user').length, turns, 'the history log has every message')

  // Override: the count before it is the whole conversation's, not the window's.
  s.send({ type: 'admin.override', userId: 'sup', messages: [{ author: 'user', text: 'fresh start' }], at: T0 + turns })
  t.match(s.log.at(-1), { type: 'context.overridden', previousCount: turns * 2 + 8, count: 1 })
  t.equal(s.conversation.total, 1)
})

// The session machine alone: what a turn costs in XState, without HTTP, streams or the store.
// 1,000 actors of the real machine (engine/machine.ts) each get a user message; the generation
// (provided here) answers at once, a reply's start and its text, as the host's does; every event
// the machine emits (history entries, published events) is received. The CPU of the measured
// turns (process.cpuUsage: the collector's threads included), after warm-up turns.
//
// bench/sse/run.ts runs it in a process of its own after the servers and prints it beside their
// CPU per message: the part of the channel's CPU that the design card's XState actor takes.
//
//   node --import @tapjs/typescript/import bench/sse/machine-alone.ts   (prints one JSON line)
// Env: MACHINE_SESSIONS (1000), MACHINE_TURNS (20 measured per session, after 5 of warm-up).
import { createActor, fromCallback } from 'xstate'
import { activeState, initialContext, sessionMachine, type GenerationInput, type SessionEvent } from '../../engine/machine.js'

const SESSIONS = Number(process.env.MACHINE_SESSIONS ?? 1000)
const TURNS = Number(process.env.MACHINE_TURNS ?? 20)
const WARM_UP = 5
const REPLY = 'You said: where is my order? Let me check that for you.'

const machine = sessionMachine.provide({
  actors: {
    generate: fromCallback<SessionEvent, GenerationInput>(({ sendBack }) => {
      queueMicrotask(() => {
        sendBack({ type: 'gen.writing', at: Date.now() })
        sendBack({ type: 'gen.completed', text: REPLY, toolCalls: [], at: Date.now() })
      })
      return () => {}
    }),
  },
})

let emitted = 0
const actors = Array.from({ length: SESSIONS }, (_, i) => {
  const context = initialContext({
    sessionId: `s${i}`,
    accountId: 'bench',
    crewId: 'bench',
    agentId: 'agent',
    agents: ['agent'],
    modifiers: {},
    arguments: {},
    at: Date.now(),
    idleTimeoutMs: 600_000,
    consumerId: 'consumer',
  })
  const actor = createActor(machine, { input: { context } })
  actor.on('*', () => void emitted++)
  actor.start()
  return actor
})

async function turns(n: number) {
  for (let t = 0; t < n; t++) {
    for (const actor of actors) actor.send({ type: 'user.message', text: 'where is my order?', consumerId: 'consumer', at: Date.now() })
    // The generations answer in microtasks; a macrotask later every turn has ended.
    await new Promise(resolve => setImmediate(resolve))
  }
}

await turns(WARM_UP)
const seqBefore = actors.map(a => a.getSnapshot().context.seq)
const cpu = process.cpuUsage()
const started = performance.now()
emitted = 0
await turns(TURNS)
const used = process.cpuUsage(cpu)
const wallMs = performance.now() - started
const measured = SESSIONS * TURNS
// Every turn ran to its reply: each session is waiting again, its history longer by each turn's entries.
const complete = actors.every(a => activeState(a.getSnapshot()) === 'idle')
const entries = actors.reduce((sum, a, i) => sum + a.getSnapshot().context.seq - seqBefore[i]!, 0)
console.log(
  JSON.stringify({
    sessions: SESSIONS,
    turns: measured,
    complete,
    cpuMsPerTurn: (used.user + used.system) / 1000 / measured,
    wallMsPerTurn: wallMs / measured,
    historyEntriesPerTurn: entries / measured,
    emittedPerTurn: emitted / measured,
  }),
)
process.exit(0)

// The session machine alone: what a turn costs in XState, without HTTP, streams or the store,
// beside two baselines measured the same way in the same run:
//   session   engine/session/machine.ts, its effects provided as the host provides them minus
//             their I/O: startTurn answers the turn (gen.completed) a microtask later, as a
//             generation that writes at once does; the other effects do nothing
//   lean      a minimal XState machine: the same four states, the same events per turn, a
//             three-field context, one assign per event
//   plain     the same transitions as a plain-JavaScript reducer (no XState)
// 1,000 sessions; per session WARM_UP turns, then TURNS measured turns: a user message, then its
// reply. CPU of the measured turns (process.cpuUsage). Each variant runs in a fresh process,
// ROUNDS times in rotated order; the report is each variant's median.
//
//   node --import @tapjs/typescript/import bench/sse/machine-alone.ts            (prints one JSON line)
//   node --import @tapjs/typescript/import bench/sse/machine-alone.ts session    (one variant, one round)
// Env: MACHINE_SESSIONS (1000), MACHINE_TURNS (20), MACHINE_ROUNDS (5).
import { execFileSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { assign, createActor, setup } from 'xstate'
import { activeState, initialContext, SESSION_EFFECTS, sessionMachine, type SessionEvent } from '../../engine/session/machine.js'

const SESSIONS = Number(process.env.MACHINE_SESSIONS ?? 1000)
const TURNS = Number(process.env.MACHINE_TURNS ?? 20)
const ROUNDS = Number(process.env.MACHINE_ROUNDS ?? 5)
const WARM_UP = 5
const VARIANTS = ['session', 'lean', 'plain'] as const
type Variant = (typeof VARIANTS)[number]
const REPLY = 'You said: where is my order? Let me check that for you.'

/** One session as the turn loop drives it. */
interface Driven {
  message(at: number): void
  idle(): boolean
}

function sessionVariant(): Driven[] {
  const effects = Object.fromEntries(SESSION_EFFECTS.map(name => [name, () => {}])) as Record<string, (args: any) => void>
  effects.startTurn = ({ self }) => queueMicrotask(() => self.send({ type: 'gen.completed', text: REPLY, toolCalls: [], at: Date.now() } satisfies SessionEvent))
  const machine = sessionMachine.provide({ actions: effects })
  const terms = { agents: ['agent'], idleTimeoutMs: 600_000, maxToolRounds: 4 }
  return Array.from({ length: SESSIONS }, () => {
    const actor = createActor(machine, { input: initialContext(terms, 'agent', Date.now()) })
    actor.start()
    return {
      message: at => actor.send({ type: 'user.message', text: 'where is my order?', consumerId: 'consumer', at }),
      idle: () => activeState(actor.getSnapshot()) === 'idle',
    }
  })
}

/** The floor of an XState machine with these states and events. */
const leanMachine = setup({
  types: { context: {} as { turnId: number; replyOwed: boolean; idleDeadline: number }, events: {} as { type: 'user.message'; at: number } | { type: 'gen.completed'; at: number } | { type: 'admin.pause' } | { type: 'admin.resume' } },
  actions: { startTurn: () => {} },
}).createMachine({
  context: { turnId: 0, replyOwed: false, idleDeadline: 0 },
  initial: 'active',
  states: {
    active: {
      initial: 'idle',
      on: { 'admin.pause': '#lean.paused' },
      states: {
        idle: { on: { 'user.message': { target: 'generating', actions: assign(({ context, event }) => ({ turnId: context.turnId + 1, idleDeadline: event.at + 600_000 })) } } },
        generating: {
          entry: 'startTurn',
          on: { 'gen.completed': { target: 'idle', actions: assign(({ event }) => ({ idleDeadline: event.at + 600_000 })) } },
        },
        tooling: {},
      },
    },
    paused: { on: { 'admin.resume': 'active' } },
    destroyed: { type: 'final' },
  },
  id: 'lean',
})

function leanVariant(): Driven[] {
  const machine = leanMachine.provide({ actions: { startTurn: ({ self }) => queueMicrotask(() => self.send({ type: 'gen.completed', at: Date.now() })) } })
  return Array.from({ length: SESSIONS }, () => {
    const actor = createActor(machine)
    actor.start()
    return {
      message: at => actor.send({ type: 'user.message', at }),
      idle: () => (actor.getSnapshot().value as { active?: string }).active === 'idle',
    }
  })
}

/** The same transitions without XState: a reducer over a plain state object. */
function plainVariant(): Driven[] {
  type State = { value: 'idle' | 'generating'; turnId: number; idleDeadline: number }
  const reduce = (state: State, event: { type: string; at: number }): State => {
    if (state.value === 'idle' && event.type === 'user.message') return { value: 'generating', turnId: state.turnId + 1, idleDeadline: event.at + 600_000 }
    if (state.value === 'generating' && event.type === 'gen.completed') return { ...state, value: 'idle', idleDeadline: event.at + 600_000 }
    return state
  }
  return Array.from({ length: SESSIONS }, () => {
    let state: State = { value: 'idle', turnId: 0, idleDeadline: 0 }
    const send = (event: { type: string; at: number }) => {
      const before = state.value
      state = reduce(state, event)
      if (before !== 'generating' && state.value === 'generating') queueMicrotask(() => send({ type: 'gen.completed', at: Date.now() }))
    }
    return { message: at => send({ type: 'user.message', at }), idle: () => state.value === 'idle' }
  })
}

async function measure(variant: Variant) {
  const sessions = variant === 'session' ? sessionVariant() : variant === 'lean' ? leanVariant() : plainVariant()
  const turns = async (n: number) => {
    for (let t = 0; t < n; t++) {
      const now = Date.now()
      for (const session of sessions) session.message(now)
      // The replies come in microtasks; a macrotask later every turn has ended.
      await new Promise(resolve => setImmediate(resolve))
    }
  }
  await turns(WARM_UP)
  const cpu = process.cpuUsage()
  await turns(TURNS)
  const used = process.cpuUsage(cpu)
  return { variant, turns: SESSIONS * TURNS, complete: sessions.every(s => s.idle()), cpuMsPerTurn: (used.user + used.system) / 1000 / (SESSIONS * TURNS) }
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const only = process.argv[2] as Variant | undefined
if (only) {
  console.log(JSON.stringify(await measure(only)))
} else {
  const self = fileURLToPath(import.meta.url)
  const results: Record<Variant, number[]> = { session: [], lean: [], plain: [] }
  let complete = true
  for (let round = 0; round < ROUNDS; round++) {
    // Rotated, so no variant always runs first (or last) on a warming machine.
    for (let i = 0; i < VARIANTS.length; i++) {
      const variant = VARIANTS[(round + i) % VARIANTS.length]!
      const out = execFileSync(process.execPath, ['--import', '@tapjs/typescript/import', self, variant], { encoding: 'utf8', timeout: 120_000 })
      const result = JSON.parse(out.trim().split('\n').at(-1)!)
      complete &&= result.complete
      results[variant].push(result.cpuMsPerTurn)
    }
  }
  const cpuMsPerTurn = Object.fromEntries(VARIANTS.map(v => [v, median(results[v])])) as Record<Variant, number>
  console.log(
    JSON.stringify({
      sessions: SESSIONS,
      turns: SESSIONS * TURNS,
      rounds: ROUNDS,
      complete,
      cpuMsPerTurn,
      ratio: { sessionToLean: cpuMsPerTurn.session / cpuMsPerTurn.lean, sessionToPlain: cpuMsPerTurn.session / cpuMsPerTurn.plain },
      runs: results,
    }),
  )
}
process.exit(0)

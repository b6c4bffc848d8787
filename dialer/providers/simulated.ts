// The simulated provider (the default): every attempt ends after a fixed latency with an outcome
// drawn from a configurable mix by a seeded RNG, so a demo batch visibly progresses and a test
// run is reproducible. A contact may pin its outcomes with customFields.simulatedOutcomes
// ("busy,no_answer,answered": attempt n gets the n-th, the last one repeats).
import { OUTCOMES, type Outcome } from '../rules.js'
import type { AttemptRequest, AttemptResult, Provider } from './types.js'

export interface SimulatedOptions {
  /** "answered=35,no_answer=30,busy=15,voicemail=15,failed=5" (weights, any scale). */
  outcomes: string
  latencyMs: number
  seed: number
}

/** Parses an outcome mix; throws on an unknown outcome or a bad weight (checked at start). */
export function parseOutcomeMix(text: string): [Outcome, number][] {
  const mix = text
    .split(',')
    .map(part => part.trim())
    .filter(Boolean)
    .map(part => {
      const [name, weight] = part.split('=').map(s => s.trim())
      if (!OUTCOMES.includes(name as Outcome)) throw new Error(`DIALER_SIM_OUTCOMES: unknown outcome "${name}" (one of ${OUTCOMES.join(', ')})`)
      const w = Number(weight)
      if (!Number.isFinite(w) || w < 0) throw new Error(`DIALER_SIM_OUTCOMES: weight of ${name} must be a number >= 0`)
      return [name as Outcome, w] as [Outcome, number]
    })
  if (mix.reduce((sum, [, w]) => sum + w, 0) <= 0) throw new Error('DIALER_SIM_OUTCOMES: the weights must not all be 0')
  return mix
}

/** mulberry32: small, fast, good enough to draw outcomes reproducibly. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

export class SimulatedProvider implements Provider {
  readonly name = 'simulated'
  private readonly mix: [Outcome, number][]
  private readonly total: number
  private readonly random: () => number

  constructor(private readonly options: SimulatedOptions) {
    this.mix = parseOutcomeMix(options.outcomes)
    this.total = this.mix.reduce((sum, [, w]) => sum + w, 0)
    this.random = seededRandom(options.seed)
  }

  async dial(attempt: AttemptRequest): Promise<AttemptResult> {
    const outcome = this.pinned(attempt) ?? this.draw()
    if (this.options.latencyMs > 0) await new Promise(r => setTimeout(r, this.options.latencyMs))
    return { outcome, detail: 'simulated' }
  }

  private pinned(attempt: AttemptRequest): Outcome | null {
    const list = attempt.customFields.simulatedOutcomes
    if (typeof list !== 'string') return null
    const outcomes = list.split(',').map(s => s.trim()).filter((s): s is Outcome => OUTCOMES.includes(s as Outcome))
    if (outcomes.length === 0) return null
    return outcomes[Math.min(attempt.attemptNumber, outcomes.length) - 1]!
  }

  private draw(): Outcome {
    let r = this.random() * this.total
    for (const [outcome, weight] of this.mix) {
      if (r < weight) return outcome
      r -= weight
    }
    return this.mix[this.mix.length - 1]![0]
  }
}

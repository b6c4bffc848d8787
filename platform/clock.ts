// Time is injected so schedulers, retention and tests agree on "now".
export interface Clock {
  now(): number
}

export const systemClock: Clock = { now: () => Date.now() }

export * from './types.js'
export { MemoryBus } from './memory-bus.js'
export { NatsBus, type NatsBusOptions } from './nats-bus.js'
export { LmdbBus } from './lmdb-bus.js'

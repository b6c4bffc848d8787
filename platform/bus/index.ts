export * from './types.js'
export { MemoryBus } from './memory-bus.js'

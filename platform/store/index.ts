export * from './types.js'
export { MemoryStore } from './memory-store.js'
export { MongoStore } from './mongo-store.js'
export { UnsafeUpdatePathError } from './update-paths.js'

export * from './types.js'
export { MemoryStore } from './memory-store.js'
export { MongoStore } from './mongo-store.js'
export { embeddedStorePath, LmdbStore, type LmdbStoreOptions } from './lmdb-store.js'

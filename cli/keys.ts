// Issues, lists and revokes API keys in the service's store: MongoDB when MONGO_URL is set,
// else the embedded database under DATA_DIR (default .data), which a running `make run` reads
// at once (LMDB lets several processes share it).
//   node dist/cli/keys.js issue --account acme --roles dialer,reports --name "CRM sync"
//   node dist/cli/keys.js list [--account acme]
//   node dist/cli/keys.js revoke <keyId>
// The key itself is printed once at issue time; only its SHA-256 digest is stored.
import { parseArgs } from 'node:util'
import { ALL_ROLES, KeyRegistry } from '../gateway/auth.js'
import type { Role } from '../platform/principal.js'
import { embeddedStorePath, LmdbStore, MongoStore, type Store } from '../platform/store/index.js'

const USAGE = `usage:
  keys issue --account ACCOUNT [--roles ${ALL_ROLES.join(',')}] [--name NAME]
  keys list [--account ACCOUNT]
  keys revoke KEY_ID`

async function main(argv: string[]) {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { account: { type: 'string' }, roles: { type: 'string' }, name: { type: 'string' } },
  })
  const [command, keyId] = positionals
  const url = process.env.MONGO_URL
  const store: Store = url ? await MongoStore.connect(url) : new LmdbStore({ path: embeddedStorePath(process.env.DATA_DIR || '.data'), sweepIntervalMs: 0 })
  try {
    const registry = new KeyRegistry(new Map(), store)
    await registry.init()
    if (command === 'issue') {
      if (!values.account) throw new Error(USAGE)
      const roles = (values.roles ? values.roles.split(',') : [...ALL_ROLES]).map(r => r.trim()) as Role[]
      const unknown = roles.filter(r => !ALL_ROLES.includes(r))
      if (unknown.length) throw new Error(`unknown role(s): ${unknown.join(', ')}`)
      const issued = await registry.issue(values.account, roles, values.name ?? `key for ${values.account}`)
      console.log(JSON.stringify({ keyId: issued.keyId, account: values.account, roles, key: issued.key }, null, 2))
      console.error('Store the key now: it is not kept and cannot be shown again.')
    } else if (command === 'list') {
      console.log(JSON.stringify(await registry.list(values.account), null, 2))
    } else if (command === 'revoke' && keyId) {
      const revoked = await registry.revoke(keyId)
      console.log(revoked ? `revoked ${keyId}` : `no active key ${keyId}`)
      if (!revoked) process.exitCode = 1
    } else {
      throw new Error(USAGE)
    }
  } finally {
    await store.close()
  }
}

main(process.argv.slice(2)).catch(error => {
  console.error((error as Error).message)
  process.exit(2)
})

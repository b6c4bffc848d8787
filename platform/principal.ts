// Who is asking: the API key a request came with, its account and its roles. The gateway's auth
// (gateway/auth.ts) makes one per request; modules read it (the account a record belongs to, the
// key named in a batch's log).

export type Role = 'dialer' | 'channel' | 'admin' | 'reports'

export interface Principal {
  keyId: string
  keyName: string
  accountId: string
  roles: ReadonlySet<Role>
}

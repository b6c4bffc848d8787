/**
 * A network partition, for tests: a plain TCP proxy (node:net) between one process and a server
 * (the nats-server). Point the process at `proxy.port` instead of the server's port; then
 *
 *   proxy.cut()     every open connection is torn down (both sides see it close) and new ones are
 *                   dropped at once: the process cannot reach the server, the server sees it gone,
 *                   everything else (the process's HTTP port, MongoDB) stays reachable
 *   proxy.heal()    new connections are forwarded again (the process's client reconnects by itself)
 *   proxy.stall()   the open connections stay open but nothing goes through either way (a link
 *                   that hangs: bytes wait in the sockets, neither side sees a close)
 *   proxy.flow()    what waited goes through, and everything after it
 *   proxy.close()   stops listening and destroys every connection
 *
 * Limits: a cut is an abrupt close (RST/FIN), and a stall loses nothing; neither is a silent
 * black hole where packets vanish and both sides only notice through their own ping timeouts.
 */
import { connect, createServer, type Socket } from 'node:net'

export interface TcpProxy {
  port: number
  cut(): void
  heal(): void
  stall(): void
  flow(): void
  close(): Promise<void>
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const pairs = new Set<[Socket, Socket]>()
  let partitioned = false
  let stalled = false

  const server = createServer(client => {
    if (partitioned) return client.destroy()
    const upstream = connect({ port: targetPort, host: targetHost })
    const pair: [Socket, Socket] = [client, upstream]
    pairs.add(pair)
    // One side closing or failing closes the other: the pair lives and dies together.
    const drop = () => {
      pairs.delete(pair)
      client.destroy()
      upstream.destroy()
    }
    for (const socket of pair) socket.once('close', drop).on('error', drop)
    if (stalled) return
    client.pipe(upstream)
    upstream.pipe(client)
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })

  const destroyAll = () => {
    for (const [client, upstream] of pairs) {
      client.destroy()
      upstream.destroy()
    }
    pairs.clear()
  }
  return {
    port: (server.address() as { port: number }).port,
    cut() {
      partitioned = true
      destroyAll()
    },
    heal() {
      partitioned = false
    },
    stall() {
      stalled = true
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream).pause()
        upstream.unpipe(client).pause()
      }
    },
    flow() {
      stalled = false
      for (const [client, upstream] of pairs) {
        client.pipe(upstream)
        upstream.pipe(client)
      }
    },
    close() {
      partitioned = true
      destroyAll()
      return new Promise<void>(resolve => server.close(() => resolve()))
    },
  }
}

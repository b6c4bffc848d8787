/**
 * A network partition, for tests: a plain TCP proxy (node:net) between one process and a server
 * (the nats-server). Point the process at `proxy.port` instead of the server's port; then
 *
 *   proxy.cut()     every open connection is torn down (both sides see it close) and new ones are
 *                   dropped at once: the process cannot reach the server, the server sees it gone,
 *                   everything else (the process's HTTP port, MongoDB) stays reachable
 *   proxy.heal()    new connections are forwarded again (the process's client reconnects by itself)
 *   proxy.close()   stops listening and destroys every connection
 *
 * Limits: a cut is an abrupt close (RST/FIN), not a silent black hole where packets vanish and
 * both sides only notice through their own ping timeouts.
 */
import { connect, createServer, type Socket } from 'node:net'

export interface TcpProxy {
  port: number
  cut(): void
  heal(): void
  close(): Promise<void>
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const pairs = new Set<[Socket, Socket]>()
  let partitioned = false

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
    close() {
      partitioned = true
      destroyAll()
      return new Promise<void>(resolve => server.close(() => resolve()))
    },
  }
}

// One raw exchange over a TCP socket, for what an HTTP client library will not send (control
// bytes in headers, conflicting framing) and to see exactly what comes back: the bytes, and
// whether the server closed the connection or left it hanging until our bound.
import net from 'node:net'

export interface RawOutcome {
  /** Everything received (latin1). */
  text: string
  /** closed: the server closed the connection; stalled: still open at the bound. */
  outcome: 'closed' | 'stalled'
  /** Status code of the first response line, if any. */
  status?: number
  ms: number
}

/** `halfClose`: end our side once the request is written, as a client that has nothing more to send may. */
export function rawExchange(port: number, request: string | Buffer, boundMs: number, options: { halfClose?: boolean } = {}): Promise<RawOutcome> {
  return new Promise(resolve => {
    const started = Date.now()
    let text = ''
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write(typeof request === 'string' ? Buffer.from(request, 'latin1') : request)
      if (options.halfClose) socket.end()
    })
    const done = (outcome: 'closed' | 'stalled') => {
      clearTimeout(timer)
      socket.destroy()
      const status = /^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]
      resolve({ text, outcome, status: status ? Number(status) : undefined, ms: Date.now() - started })
    }
    const timer = setTimeout(() => done('stalled'), boundMs)
    socket.on('data', chunk => (text += chunk.toString('latin1')))
    socket.on('error', () => {})
    socket.on('close', () => done('closed'))
  })
}

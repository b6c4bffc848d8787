// WebSockets on the gateway's uWebSockets.js app: what every socket endpoint shares, whatever it
// speaks. The handshake (auth, Origin, the route's checks) is answered in gateway/server.ts like
// any request; from the upgrade on, the socket is a SocketLink handed to the route's handler.
// Everything uWS calls is guarded: a throw in a handler closes that socket (1011), never the
// process. Frames a handler cannot read are closed here with a code that says why, so the
// module's protocol only ever sees text frames within the size limit.
import type { WebSocket, WebSocketBehavior } from '@trufflesuite/uws-js-unofficial'
import type { SocketHandler, SocketLink } from '../platform/http.js'

/** Close codes of RFC 6455 the gateway itself sends. */
export const SOCKET_CLOSE = {
  /** A binary frame: every endpoint speaks JSON text. */
  unsupportedData: 1003,
  /** A text frame that is not UTF-8. */
  invalidPayload: 1007,
  /** A frame over the endpoint's size limit. */
  tooBig: 1009,
  /** Our fault, in the code serving this socket. */
  internalError: 1011,
  /** The service stops: connect again (to another gateway). */
  serviceRestart: 1012,
} as const

export interface SocketLimits {
  /** Frames larger than this are closed with 1009 (a frame well over it is dropped by uWS without a close frame). */
  maxFrameBytes: number
  /** Idle seconds before uWS closes a socket; it pings at half of it (the heartbeat). */
  idleTimeoutSeconds: number
  /** Bytes waiting to go out past which `send` answers false (the module drops a slow reader). */
  bufferBytes: number
}

/** What the gateway keeps on each socket: the route's handler and, once open, its link. */
export interface SocketData {
  handler: SocketHandler
  link?: UwsSocketLink
}

/** Browsers and the `ws` client send `Sec-WebSocket-Protocol` as a comma-separated list. */
export function offeredProtocols(header: string | undefined): string[] {
  if (!header) return []
  return header
    .split(',')
    .map(p => p.trim())
    .filter(Boolean)
    .slice(0, 16)
}

/**
 * Whether a handshake's Origin may open a socket. No Origin: not a browser (servers, bridges);
 * their credential is an API key or a ticket. A browser's Origin must be listed: a page of
 * another site could otherwise open a socket with a ticket it was given or a cookie-less key.
 */
export function originAllowed(origin: string | undefined, allowed: readonly string[]): boolean {
  if (origin === undefined || origin === '') return true
  return allowed.includes('*') || allowed.includes(origin.replace(/\/$/, '').toLowerCase())
}

const encoder = new TextEncoder()

/** A close frame's reason holds 123 bytes of UTF-8; a longer one is cut on a character boundary. */
export function closeReason(reason: string): string {
  if (encoder.encode(reason).length <= 123) return reason
  let cut = reason.slice(0, 123)
  while (encoder.encode(cut).length > 120) cut = cut.slice(0, -1)
  return `${cut}…`
}

class UwsSocketLink implements SocketLink {
  closed = false

  constructor(
    private readonly ws: WebSocket<SocketData>,
    private readonly limits: SocketLimits,
    private readonly onFault: (error: unknown) => void,
  ) {}

  send(text: string): boolean {
    if (this.closed) return false
    // uWS keeps what it cannot write yet (maxBackpressure is set far above the bound), so
    // nothing is lost; the bound is ours to judge.
    this.ws.send(text, false, false)
    return this.ws.getBufferedAmount() <= this.limits.bufferBytes
  }

  batch(work: () => void) {
    if (this.closed) return work()
    this.ws.cork(work)
  }

  close(code: number, reason: string) {
    if (this.closed) return
    this.closed = true
    try {
      this.ws.end(code, closeReason(reason))
    } catch (error) {
      this.onFault(error)
    }
  }

  reportFault(error: unknown) {
    this.onFault(error)
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true })

/** The uWS behaviour of a socket route: open, message, close, each guarded. */
export function socketBehavior(limits: SocketLimits, onFault: (error: unknown) => void, links: Set<SocketLink>): WebSocketBehavior<SocketData> {
  /** Runs a handler's callback; a throw closes that socket only. */
  const guarded = (ws: WebSocket<SocketData>, work: (data: SocketData) => void) => {
    let data: SocketData | undefined
    try {
      data = ws.getUserData()
      work(data)
    } catch (error) {
      onFault(error)
      data?.link?.close(SOCKET_CLOSE.internalError, 'internal error')
    }
  }
  return {
    // Frames up to 4x the limit (at least 1 MiB) are read and closed with a 1009 that says so;
    // uWS drops a larger one without a close frame (the client sees 1006).
    maxPayloadLength: Math.max(4 * limits.maxFrameBytes, 1024 * 1024),
    idleTimeout: limits.idleTimeoutSeconds,
    sendPingsAutomatically: true,
    maxBackpressure: Math.max(64 * limits.bufferBytes, 64 * 1024 * 1024),
    closeOnBackpressureLimit: 0,
    open: ws =>
      guarded(ws, data => {
        const link = new UwsSocketLink(ws, limits, onFault)
        data.link = link
        links.add(link)
        data.handler.opened(link)
      }),
    message: (ws, message, isBinary) =>
      guarded(ws, data => {
        const link = data.link!
        if (link.closed) return
        if (isBinary) return link.close(SOCKET_CLOSE.unsupportedData, 'binary frames are not accepted: send JSON text frames')
        if (message.byteLength > limits.maxFrameBytes) return link.close(SOCKET_CLOSE.tooBig, `frame over ${limits.maxFrameBytes} bytes`)
        let text: string
        try {
          text = utf8.decode(message)
        } catch {
          return link.close(SOCKET_CLOSE.invalidPayload, 'a text frame must be valid UTF-8')
        }
        data.handler.message(text)
      }),
    close: (ws, code) =>
      guarded(ws, data => {
        if (data.link) {
          data.link.closed = true
          links.delete(data.link)
        }
        data.handler.closed(code)
      }),
  }
}

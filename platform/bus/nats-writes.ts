// Fewer socket writes for NATS. nats.js flushes what was published at the end of each microtask
// checkpoint, so a process that publishes from many I/O callbacks and timers in one turn of the
// event loop (an engine node: command replies, session events, journal appends for hundreds of
// sessions) makes one `write` system call per callback. Corking the socket until the loop's
// check phase (setImmediate) gathers them into one `writev`: in bench/cluster the socket writes
// were a quarter of an engine node's CPU per message. Nothing waits longer than the current turn
// of the loop, and a flush (`nc.flush()`) still goes out with it.
//
// nats.js has no option for this, so its Node transport's `send` is wrapped, once per process;
// the transport is created again on every reconnect, so the wrap is on its prototype.
import { NodeTransport } from '@nats-io/transport-node/lib/node_transport.js'
import type { Socket } from 'node:net'

type Sending = { socket?: Socket; isClosed?: boolean; send(frame: Uint8Array): void }

let installed = false
/** Sockets corked in this turn of the loop (a handful: one per connection). */
const corked = new Set<Socket>()

function uncork(socket: Socket) {
  if (corked.delete(socket)) socket.uncork()
}

export function coalesceNatsWrites() {
  if (installed) return
  installed = true
  const proto = NodeTransport.prototype as unknown as Sending
  const send = proto.send
  proto.send = function (this: Sending, frame: Uint8Array) {
    const socket = this.socket
    if (socket && !this.isClosed && !corked.has(socket) && !socket.destroyed) {
      corked.add(socket)
      socket.cork()
      setImmediate(() => uncork(socket))
    }
    send.call(this, frame)
  }
}

/**
 * Writes what is gathered now. For what publishes at the end of a loop turn itself (from its own
 * setImmediate, as the session event log does): its writes go out in this turn of the loop, not
 * the next one.
 */
export function writeNatsNow() {
  for (const socket of [...corked]) uncork(socket)
}

// The telephony platform's side of a ConversationRelay call, for tests: frames written from
// Twilio's published WebSocket message format (twilio.com/docs/voice/conversationrelay/
// websocket-messages), not from our types, sent with the `ws` package over a real socket.
import WebSocket from 'ws'
import { handshake } from './ws.js'

export const RELAY = '/assistants-channel/api/v1/channel/api/conversation-relay'

/** A setup frame as Twilio documents it. */
export const setupFrame = (customParameters: Record<string, string> = { callReference: 'bar' }) => ({
  type: 'setup',
  sessionId: 'VX00000000000000000000000000000000',
  accountSid: 'ACXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX',
  parentCallSid: '',
  callSid: 'CA00000000000000000000000000000000',
  from: '+18005550100',
  to: '+18005550101',
  forwardedFrom: '+18005550102',
  callType: 'PSTN',
  callerName: '',
  direction: 'inbound',
  callStatus: 'RINGING',
  customParameters,
})
export const prompt = (voicePrompt: string, last = true) => ({ type: 'prompt', voicePrompt, lang: 'en-US', last })

/** The platform's side of one call: what it sent us is in `frames`, in order. */
export class Platform {
  readonly frames: any[] = []
  refused: { status: number; body: any } | null = null
  closedWith: { code: number; reason: string } | null = null
  private waiters: (() => void)[] = []
  readonly ready: Promise<void>

  constructor(readonly ws: WebSocket) {
    this.ready = handshake(ws, refused => (this.refused = refused))
    ws.on('message', data => {
      this.frames.push(JSON.parse(String(data)))
      this.wake()
    })
    ws.once('close', (code, reason) => {
      this.closedWith = { code, reason: String(reason) }
      this.wake()
    })
  }

  private wake() {
    for (const w of this.waiters.splice(0)) w()
  }

  send(frame: unknown) {
    this.ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame))
  }

  /** Waits until `done` holds of the frames received (or the socket closed). */
  async until(done: (frames: any[]) => boolean, what: string, timeoutMs = 15_000) {
    const deadline = Date.now() + timeoutMs
    while (!done(this.frames)) {
      if (this.closedWith) throw new Error(`closed ${JSON.stringify(this.closedWith)} before ${what}; got ${JSON.stringify(this.frames)}`)
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(this.frames)}`)
      await new Promise<void>(resolve => {
        const timer = setTimeout(resolve, 100)
        this.waiters.push(() => {
          clearTimeout(timer)
          resolve()
        })
      })
    }
  }

  /** The text tokens of the next reply, once its `last: true` token came. */
  async reply(): Promise<{ tokens: string[]; text: string }> {
    const from = this.frames.length
    await this.until(f => f.slice(from).some(x => x.type === 'text' && x.last === true), 'the last token of a reply')
    const end = this.frames.findIndex((x, i) => i >= from && x.type === 'text' && x.last === true)
    const tokens = this.frames.slice(from, end + 1).filter(x => x.type === 'text').map(x => x.token as string)
    return { tokens, text: tokens.join('') }
  }

  async closed(timeoutMs = 15_000) {
    const deadline = Date.now() + timeoutMs
    while (!this.closedWith) {
      if (Date.now() > deadline) throw new Error(`not closed; got ${JSON.stringify(this.frames)}`)
      await new Promise(r => setTimeout(r, 50))
    }
    return this.closedWith
  }
}

export async function connect(base: string, token: string | null, headers: Record<string, string> = {}, query?: string) {
  const url = `${base.replace(/^http/, 'ws')}${RELAY}${query ?? (token === null ? '' : `?token=${token}`)}`
  const platform = new Platform(new WebSocket(url, { headers }))
  await platform.ready.catch(() => {})
  return platform
}


// Talks to an assistant from a terminal over the channel's WebSocket: opens a session on a crew
// (or attaches to one), sends each line typed as a user message and prints the reply as it
// streams. A line `/interrupt` cuts the reply being written, `/end` ends the session.
//   node dist/cli/chat.js [--url http://localhost:8080] [--crew demo] [--session ID [--last-event-id N]]
// The API key is read from SWITCHBOARD_API_KEY (the `make run` development key by default).
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import WebSocket from 'ws'

const SOCKET_PATH = '/assistants-channel/api/v1/channel/api/socket'
const DEV_KEY = 'dev-key-change-me-000000'

const USAGE = `usage: chat [--url http://localhost:8080] [--crew demo] [--session SESSION_ID [--last-event-id N]]
  type a line to send it; /interrupt cuts the reply, /end ends the session, Ctrl-D leaves it open`

function main(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    options: { url: { type: 'string' }, crew: { type: 'string' }, session: { type: 'string' }, 'last-event-id': { type: 'string' }, help: { type: 'boolean' } },
  })
  if (values.help) return console.log(USAGE)
  const base = (values.url ?? process.env.SWITCHBOARD_URL ?? 'http://localhost:8080').replace(/\/$/, '').replace(/^http/, 'ws')
  const query = values.session
    ? `?sessionId=${encodeURIComponent(values.session)}${values['last-event-id'] ? `&lastEventId=${encodeURIComponent(values['last-event-id'])}` : ''}`
    : ''
  const ws = new WebSocket(`${base}${SOCKET_PATH}${query}`, { headers: { apikey: process.env.SWITCHBOARD_API_KEY ?? DEV_KEY } })
  const lines = createInterface({ input: process.stdin, terminal: process.stdin.isTTY })
  let next = 1
  let writing = false
  const out = (text: string) => process.stdout.write(text)

  ws.on('unexpected-response', (_req, res) => {
    let body = ''
    res.on('data', chunk => (body += chunk))
    res.on('end', () => {
      console.error(`refused: ${res.statusCode} ${body}`)
      process.exit(1)
    })
  })
  ws.on('error', error => {
    console.error(`socket error: ${error.message}`)
    process.exit(1)
  })
  ws.on('open', () => {
    if (!values.session) ws.send(JSON.stringify({ type: 'open', id: next++, crewId: values.crew ?? 'demo' }))
  })
  ws.on('message', raw => {
    const frame = JSON.parse(String(raw))
    if (frame.type === 'error') return console.error(`\n[${frame.of ?? 'frame'} refused: ${frame.status} ${frame.error.code}: ${frame.error.message}]`)
    if (frame.type === 'ack') {
      if (frame.of === 'open' || frame.of === 'attach') console.error(`[session ${frame.result.sessionId}, consumer ${frame.result.consumerId}]`)
      return
    }
    if (frame.type !== 'event') return
    const data = frame.data
    switch (frame.event) {
      case 'assistant.response':
        if (!writing) out('assistant> ')
        writing = true
        return out(data.delta)
      case 'assistant.message':
        // An impersonation or a greeting comes whole, without chunks.
        if (!writing) out(`assistant> ${data.text}`)
        writing = false
        return out('\n')
      case 'assistant.interrupted':
        writing = false
        return out(' [cut]\n')
      case 'crew.status.waiting':
        return out('you> ')
      case 'session.transferred':
        return console.error(`\n[transferred to ${data.agentId}]`)
      case 'session.paused':
      case 'session.resumed':
        return console.error(`\n[${frame.event}]`)
      case 'assistant.error':
        return console.error(`\n[assistant error: ${data.message}]`)
    }
  })
  ws.on('close', (code, reason) => {
    console.error(`\n[closed ${code}${reason.length ? `: ${reason}` : ''}]`)
    process.exit(code === 4000 || code === 1000 ? 0 : 1)
  })
  lines.on('line', line => {
    const text = line.trim()
    if (!text || ws.readyState !== WebSocket.OPEN) return
    if (text === '/interrupt') return ws.send(JSON.stringify({ type: 'interrupt', id: next++ }))
    if (text === '/end') return ws.send(JSON.stringify({ type: 'end', id: next++, reason: 'user_closed' }))
    ws.send(JSON.stringify({ type: 'message', id: next++, message: text }))
  })
  // Ctrl-D: leave; the session stays open (attach again with --session and --last-event-id).
  lines.on('close', () => ws.close(1000))
}

main(process.argv.slice(2))

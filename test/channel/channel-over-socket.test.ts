// The channel's black-box suite (channel.test.ts) again, each session opened and streamed over the
// channel's WebSocket (createSession honours CHANNEL_TRANSPORT): the same events, ids, payloads and
// answers whatever the transport. Listeners the suite opens itself stay on SSE, so it also checks
// the two transports side by side on one session.
process.env.CHANNEL_TRANSPORT = 'ws'
await import('./channel.test.js')

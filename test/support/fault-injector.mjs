// Preloaded (NODE_OPTIONS=--import) into a real service process by test/platform/process-guard:
// injects the faults no request can cause once the edge is sound, when the test sends SIGUSR2
// (after the service is up). FAULT=once: one uncaught exception and one unhandled rejection;
// FAULT=storm: an uncaught exception every 50 ms.
process.on('SIGUSR2', () => {
  if (process.env.FAULT === 'once') {
    setTimeout(() => {
      throw new Error('injected uncaught exception')
    }, 0)
    void Promise.reject(new Error('injected unhandled rejection'))
  } else if (process.env.FAULT === 'storm') {
    setInterval(() => {
      throw new Error('injected exception storm')
    }, 50)
  }
})

// Waiting with a bound, for work that may never settle (a close the store cannot write, a
// request body a client never finishes sending).

/** The value of `work`, or undefined when it fails or has not settled within `timeoutMs`. */
export function valueWithin<T>(work: Promise<T>, timeoutMs: number): Promise<T | undefined> {
  return new Promise(resolve => {
    const timer = setTimeout(() => resolve(undefined), timeoutMs).unref()
    work.then(
      value => {
        clearTimeout(timer)
        resolve(value)
      },
      () => {
        clearTimeout(timer)
        resolve(undefined)
      },
    )
  })
}

/** Resolves when `work` settles (either way) or after `timeoutMs`, whichever comes first. The timer never keeps the process up. */
export function settledWithin(work: Promise<unknown>, timeoutMs: number): Promise<void> {
  return new Promise(resolve => {
    const timer = setTimeout(resolve, timeoutMs).unref()
    const done = () => {
      clearTimeout(timer)
      resolve()
    }
    work.then(done, done)
  })
}

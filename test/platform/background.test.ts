// Background threads (contact validation, chunk application) run at a lower OS priority than
// the event loop's thread, so on a busy machine the kernel serves live sessions first.
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { getPriority } from 'node:os'
import { validateLoad } from '../../dialer/contact-validation.js'

/** The nice value of each thread of this process, by thread name (/proc/self/task/<tid>). */
function threadNices(): { name: string; nice: number }[] {
  return readdirSync('/proc/self/task').map(tid => ({ name: readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim(), nice: getPriority(Number(tid)) }))
}

t.test('the validation thread runs below the event loop', { skip: process.platform !== 'linux' && 'thread priorities are read from /proc' }, async t => {
  const before = threadNices().filter(x => x.nice > 0).length
  // A body over the inline threshold goes to the worker thread (starting it).
  const body = Buffer.from(JSON.stringify({ contacts: Array.from({ length: 200 }, (_, i) => ({ identifier: `c${i}`, name: `C ${i}`, addresses: [{ address: String(34600000000 + i), type: 'phone', priority: 1 }] })) }))
  const load = await validateLoad(body, { now: Date.now(), maxJsonDepth: 64, chunkSize: 100 }, 1)
  t.equal(load.count, 200)
  const nices = threadNices()
  t.equal(getPriority(process.pid), 0, 'the event loop thread keeps its priority')
  t.ok(nices.filter(x => x.nice >= 10).length > before, `a thread at nice 10 or lower priority appeared: ${JSON.stringify(nices)}`)
})

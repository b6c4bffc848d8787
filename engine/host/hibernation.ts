// Hibernation (ENGINE_HIBERNATE_AFTER_MS): a session quiet for that long (between turns, nothing
// pending) lets its actor and conversation go, once its checkpoint covers everything (asked for
// when it does not yet); its next command wakes it from the store (engine/host/loading.ts). Quiet
// sessions wait in the order they became quiet; a periodic pass takes those quiet long enough,
// a bounded number per macrotask, oldest first.
import { isQuiet, type LiveSession } from '../session/live-session.js'

/** Sessions looked at per macrotask by one pass (the rest in the next, setImmediate). */
const PASS_SLICE = 200

export interface HibernationOptions {
  /** How long a session stays quiet before it hibernates; 0 = never. */
  afterMs: number
  now: () => number
  /** Lets the session's actor go (the host unbinds and stops it). */
  hibernate: (live: LiveSession) => void
}

export class Hibernation {
  /** Quiet sessions in the order they became quiet; an entry is stale once `since` differs from the session's. */
  private quiet: { live: LiveSession; since: number }[] = []
  /** Due sessions whose checkpoint was being written: looked at again by the next pass. */
  private writing: { live: LiveSession; since: number }[] = []
  private head = 0
  private timer: NodeJS.Timeout | null = null
  private passing = false
  private stopped = false

  constructor(private readonly options: HibernationOptions) {}

  start() {
    const after = this.options.afterMs
    if (after <= 0 || this.timer) return
    this.timer = setInterval(() => this.pass(), Math.max(50, Math.min(1000, after / 4)))
    this.timer.unref()
  }

  stop() {
    this.stopped = true
    if (this.timer) clearInterval(this.timer)
  }

  /** The session may be between turns with nothing pending: noted as a candidate if it is. */
  note(live: LiveSession) {
    if (this.options.afterMs <= 0 || live.finished || !live.actor || live.quietSince) return
    if (!isQuiet(live.actor.getSnapshot())) return
    live.quietSince = this.options.now()
    this.quiet.push({ live, since: live.quietSince })
  }

  /** Hibernates the sessions quiet for long enough. */
  private pass() {
    if (this.passing || this.stopped) return
    this.passing = true
    const due = this.options.now() - this.options.afterMs
    const again = this.writing
    this.writing = []
    for (const entry of again) this.consider(entry.live, entry.since)
    const slice = () => {
      let n = 0
      while (this.head < this.quiet.length && n < PASS_SLICE) {
        const { live, since } = this.quiet[this.head]!
        if (since > due) break
        this.head++
        n++
        this.consider(live, since)
      }
      // What was read goes once it is most of the array (no shift() per entry).
      if (this.head > 1024 && this.head * 2 > this.quiet.length) {
        this.quiet = this.quiet.slice(this.head)
        this.head = 0
      }
      if (n === PASS_SLICE && !this.stopped) setImmediate(slice)
      else this.passing = false
    }
    slice()
  }

  /** A session due to hibernate: it does, unless busy again, pinned, or not all written yet. */
  private consider(live: LiveSession, since: number) {
    if (live.quietSince !== since || live.finished || !live.actor) return
    if (!isQuiet(live.actor.getSnapshot())) {
      live.quietSince = 0 // busy again: noted when it is quiet next
      return
    }
    // Pinned by a command, or its writes given up on (its next change tries again): looked at later.
    if (live.pins > 0 || live.writer.unpersisted) {
      live.quietSince = 0
      this.note(live)
      return
    }
    if (!live.writer.quiet()) {
      // Its checkpoint first (a no-op when one is on its way); looked at again by the next pass.
      live.writer.checkpoint()
      this.writing.push({ live, since })
      return
    }
    this.options.hibernate(live)
  }
}

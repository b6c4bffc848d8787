// The commands a live session takes (SessionCommand, engine/transport.ts), one handler each.
// Most hand the machine their event as it is, and the machine refuses (409) what its state does
// not take. A handler does more only when the command must check or answer something first: a
// consumer the session knows, a tool call to validate, an agent of the crew, a correlation that
// waits, a message acknowledged once it is written. A new command is one entry in `handlers`
// (the compiler asks for it once the command is in SessionCommand).
import { Invalid, InvalidState, NotFound, Unavailable } from '../../platform/errors.js'
import type { OverloadGuard } from '../../platform/overload.js'
import type { SessionRepository } from '../persistence/session-store.js'
import { touchConsumer, type LiveSession } from '../session/live-session.js'
import { activeState, replyId, stateName } from '../session/machine.js'
import type { ToolRunner } from '../session/tools.js'
import { snapshotView } from '../supervision/snapshot-view.js'
import type { SessionCommand } from '../transport.js'
import type { LiveSessions } from './live-sessions.js'
import type { SessionActors } from './session-actors.js'
import type { SessionDriver } from './session-driver.js'

export interface CommandDeps {
  sessions: Pick<LiveSessions, 'turnsInFlight'>
  actors: Pick<SessionActors, 'awake'>
  driver: Pick<SessionDriver, 'send'>
  tools: Pick<ToolRunner, 'inject'>
  store: Pick<SessionRepository, 'entriesAfter' | 'addConsumer'>
  overload: OverloadGuard
  /** A user message is answered once its history entry is committed. */
  durableAcks: boolean
  /** ENGINE_MAX_CONSUMER_IDS_PER_SESSION. */
  maxConsumerIds: number
  now(): number
}

type CommandType = SessionCommand['type']
type CommandOf<K extends CommandType> = Extract<SessionCommand, { type: K }>
/** What a command does to the live session; its answer (JSON), or a promise of it. */
type Handler<K extends CommandType> = (deps: CommandDeps, live: LiveSession, command: CommandOf<K>, at: number) => unknown

/** Commands whose machine event is the command itself, at its time. */
type MachineCommand = CommandOf<'admin.append' | 'admin.override' | 'admin.attend' | 'admin.whisper' | 'admin.impersonate' | 'admin.pause' | 'admin.resume'>

function toMachine(deps: CommandDeps, live: LiveSession, command: MachineCommand, at: number) {
  deps.driver.send(live, { ...command, at })
  return {}
}

async function userMessage(deps: CommandDeps, live: LiveSession, command: CommandOf<'user.message'>, at: number) {
  if (!live.consumers.has(command.consumerId)) {
    throw new Invalid('UNKNOWN_CONSUMER', `Consumer ${command.consumerId} is not attached to session ${live.id}`)
  }
  // Refused before anything is recorded: a refused message is not in the conversation.
  // The turn limit applies to a message that would start a turn (one in flight takes it in).
  deps.overload.admit('turn', { turnsInFlight: live.busy ? 0 : deps.sessions.turnsInFlight })
  touchConsumer(live, command.consumerId)
  deps.driver.send(live, { type: 'user.message', text: command.text, consumerId: command.consumerId, at })
  if (deps.durableAcks) {
    // The message's entries (and those of the same step) are up to this seq; entries the
    // turn adds while we wait are not this message's.
    const upTo = live.seq
    // Acknowledged once its history entry is committed (with the control state), not after
    // the checkpoint: a restore folds the journal past the last checkpoint.
    await live.writer.entriesWritten(upTo)
    // Let go meanwhile (another node writes the session now): what it was not told of is not
    // acknowledged here; the gateway sends the message again to the owner.
    if (live.writer.discardedUpTo(upTo)) throw new Unavailable('NOT_OWNER', `Session ${live.id} is not hosted by this node any more`, {}, { retryAfterSeconds: 1 })
    if (live.writer.holdsUpTo(upTo)) throw new Unavailable('SESSION_NOT_PERSISTED', `Session ${live.id} cannot be persisted right now; retry shortly`, {}, { retryAfterSeconds: 5 })
  }
  return { accepted: true }
}

/**
 * Barge-in: the reply being written stops (the machine's `generating` exit cancels it), and
 * nothing more of it is published. Answered, not refused, when no reply is being written: a
 * voice bridge says so whenever the caller speaks.
 */
function interrupt(deps: CommandDeps, live: LiveSession, command: CommandOf<'user.interrupt'>, at: number) {
  if (!live.consumers.has(command.consumerId)) {
    throw new Invalid('UNKNOWN_CONSUMER', `Consumer ${command.consumerId} is not attached to session ${live.id}`)
  }
  const snapshot = deps.actors.awake(live).getSnapshot()
  if (activeState(snapshot) !== 'generating') return { interrupted: false }
  const { turnId } = snapshot.context
  const messageId = replyId(snapshot.context)
  touchConsumer(live, command.consumerId)
  deps.driver.send(live, { type: 'user.interrupt', consumerId: command.consumerId, heard: command.heard, at })
  return { interrupted: true, turnId, messageId }
}

/**
 * A consumer id joins the session (or is used again). Ids are bounded per session: past
 * ENGINE_MAX_CONSUMER_IDS_PER_SESSION the least recently used is forgotten (its next message is
 * refused as an unknown consumer; listening again makes it known again).
 */
async function attachConsumer(deps: CommandDeps, live: LiveSession, command: CommandOf<'consumer.attach'>) {
  const { consumerId } = command
  if (live.consumers.has(consumerId)) {
    touchConsumer(live, consumerId)
    return { consumerId }
  }
  const max = deps.maxConsumerIds
  live.consumers.add(consumerId)
  for (const oldest of live.consumers) {
    if (live.consumers.size <= max) break
    live.consumers.delete(oldest)
  }
  await deps.store.addConsumer(live.id, consumerId, max)
  return { consumerId }
}

/** An operator's tool call: validated (400), run at once when builtin, recorded by the machine. */
function injectTool(deps: CommandDeps, live: LiveSession, command: CommandOf<'admin.toolinject'>, at: number) {
  const { event, reply } = deps.tools.inject(live.crew, command, at)
  deps.driver.send(live, event)
  return reply
}

function transfer(deps: CommandDeps, live: LiveSession, command: CommandOf<'admin.transfer'>, at: number) {
  const context = deps.actors.awake(live).getSnapshot().context
  if (!context.terms.agents.includes(command.target)) {
    throw new Invalid('UNKNOWN_AGENT', `Agent ${command.target} is not an agent of crew ${live.crew.id}`, { agents: context.terms.agents })
  }
  if (command.target === context.agentId) {
    throw new InvalidState('ALREADY_ASSIGNED', `Session ${live.id} is already handled by agent ${command.target}`)
  }
  deps.driver.send(live, { type: 'admin.transfer', userId: command.userId, target: command.target, reason: command.reason, at })
  return { agentId: command.target }
}

/** An external tool's result: 404 when no call waits for the correlation, 409 when it was answered. */
function resolve(deps: CommandDeps, live: LiveSession, command: CommandOf<'external.resolve'>, at: number) {
  const context = deps.actors.awake(live).getSnapshot().context
  const pending = context.pendingTools.find(p => p.correlationId === command.correlationId)
  if (!pending) {
    if (context.resolved.includes(command.correlationId)) {
      throw new InvalidState('CORRELATION_ALREADY_RESOLVED', `Correlation ${command.correlationId} already has its result`)
    }
    throw new NotFound('CORRELATION_NOT_FOUND', `No tool call of session ${live.id} waits for correlation ${command.correlationId}`)
  }
  deps.driver.send(live, { type: 'external.resolve', correlationId: command.correlationId, result: command.result, userId: command.userId, at })
  return { callId: pending.callId, tool: pending.tool }
}

/** Answered once the session's close is written. */
async function destroy(deps: CommandDeps, live: LiveSession, command: CommandOf<'session.destroy'>, at: number) {
  deps.driver.send(live, { type: 'session.destroy', reason: command.reason, by: command.by, userId: command.userId, at })
  await live.cleanup
  return { sessionId: live.id, reason: command.reason }
}

/** A page of the session's history, once what it holds is written. */
async function history(deps: CommandDeps, live: LiveSession, command: CommandOf<'query.history'>) {
  const { after, limit } = command
  // Every entry so far committed to the journal (not the report record: in a cluster MongoDB may
  // be behind); a session whose writes were given up on answers what the journal has.
  if (!live.writer.unpersisted) await live.writer.entriesWritten(live.seq)
  const page = await deps.store.entriesAfter(live.id, after, limit + 1)
  const entries = page.slice(0, limit).map(entry => ({ ...entry, at: new Date(entry.at).toISOString() }))
  return {
    sessionId: live.id,
    state: stateName(deps.actors.awake(live).getSnapshot()),
    logPosition: live.seq,
    data: entries,
    hasMore: page.length > limit,
  }
}

function snapshot(deps: CommandDeps, live: LiveSession) {
  return snapshotView({
    sessionId: live.id,
    crew: live.crew,
    snapshot: deps.actors.awake(live).getSnapshot(),
    conversation: live.conversation!,
    logPosition: live.seq,
    createdAt: live.createdAt,
    updatedAt: live.updatedAt,
  })
}

const handlers: { [K in CommandType]: Handler<K> } = {
  'user.message': userMessage,
  'consumer.attach': attachConsumer,
  'user.interrupt': interrupt,
  'admin.append': toMachine,
  'admin.override': toMachine,
  'admin.attend': toMachine,
  'admin.whisper': toMachine,
  'admin.impersonate': toMachine,
  'admin.toolinject': injectTool,
  'admin.transfer': transfer,
  'admin.pause': toMachine,
  'admin.resume': toMachine,
  'external.resolve': resolve,
  'session.destroy': destroy,
  'query.history': history,
  'query.snapshot': snapshot,
}

export class SessionCommands {
  constructor(private readonly deps: CommandDeps) {}

  /** Runs the command on the live session (woken); its answer, or a promise of it. */
  run(live: LiveSession, command: SessionCommand): unknown {
    // A type with no handler passes neither the transport's types nor its schemas; if one did, the
    // machine would refuse it (409) as any event it does not take.
    const handler = Object.hasOwn(handlers, command.type) ? (handlers[command.type] as Handler<CommandType>) : (toMachine as Handler<CommandType>)
    return handler(this.deps, live, command, this.deps.now())
  }
}

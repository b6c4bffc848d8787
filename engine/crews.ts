// Crews: the assistants a session can be opened with, loaded from CREWS_FILE and validated at
// start (shape, unique ids, known tool handlers, compilable tool schemas and rule patterns) so
// a bad file fails before any port opens.
import { readFileSync } from 'node:fs'
import { SchemaRegistry, type JsonSchema, type ValidationIssue } from '../schemas/validator.js'
import type { AttentionSettings } from './supervision/attention.js'
import type { Guardrail } from './session/conversation.js'
import type { Modifiers } from './types.js'

export const BUILTIN_HANDLERS = ['echo', 'clock', 'external'] as const
export type ToolHandler = (typeof BUILTIN_HANDLERS)[number]

export interface ToolDefinition {
  id: string
  description: string
  parameters: JsonSchema
  handler: ToolHandler
  /** External tools: how long the Resolver has to answer (ms). */
  timeoutMs?: number
}

export interface ScriptedRule {
  /** Regular expression tested against the user's last message (case-insensitive). */
  match: string
  reply?: string
  tool?: { id: string; args: Record<string, string> }
}

export interface ScriptedAssistant {
  provider: 'scripted'
  greeting?: string
  rules?: ScriptedRule[]
  afterTool?: string
  fallback?: string
  /** Delay between streamed chunks (ms); 0 streams them back to back. */
  chunkDelayMs?: number
}

export interface OpenAiAssistant {
  provider: 'openai'
  baseUrl: string
  model: string
  /** Name of the environment variable holding the API key (never the key itself). */
  apiKeyEnv?: string
  systemPrompt?: string
  temperature?: number
  timeoutMs?: number
}

export interface Crew {
  id: string
  name: string
  maxConcurrentSessions: number
  /** Accounts allowed to use the crew; absent means every account. */
  accounts?: string[]
  agents: string[]
  modifiers: Modifiers
  guardrails?: Guardrail[]
  /** When its sessions call a supervisor (engine/supervision/attention.ts); defaults there. */
  attention?: AttentionSettings
  tools: ToolDefinition[]
  assistant: ScriptedAssistant | OpenAiAssistant
}

const modifiers = {
  type: 'object',
  additionalProperties: false,
  properties: {
    prefix: { type: 'string' },
    suffix: { type: 'string' },
    style: { type: 'string' },
    replacements: {
      type: 'array',
      items: { type: 'object', required: ['from', 'to'], additionalProperties: false, properties: { from: { type: 'string', minLength: 1 }, to: { type: 'string' } } },
    },
  },
}

const crewsFileSchema: JsonSchema = {
  type: 'object',
  required: ['crews'],
  additionalProperties: false,
  properties: {
    crews: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['id', 'name', 'maxConcurrentSessions', 'agents', 'tools', 'assistant'],
        additionalProperties: false,
        properties: {
          id: { type: 'string', pattern: '^[A-Za-z0-9_.-]{1,64}$' },
          name: { type: 'string', minLength: 1 },
          maxConcurrentSessions: { type: 'integer', minimum: 1 },
          accounts: { type: 'array', items: { type: 'string', minLength: 1 } },
          agents: { type: 'array', minItems: 1, uniqueItems: true, items: { type: 'string', pattern: '^[A-Za-z0-9_.-]{1,64}$' } },
          modifiers,
          guardrails: {
            type: 'array',
            items: {
              type: 'object',
              required: ['id', 'pattern', 'action', 'appliesTo'],
              additionalProperties: false,
              properties: {
                id: { type: 'string', minLength: 1 },
                pattern: { type: 'string', minLength: 1 },
                action: { enum: ['redact'] },
                appliesTo: { enum: ['user', 'assistant', 'both'] },
                replacement: { type: 'string' },
              },
            },
          },
          attention: {
            type: 'object',
            additionalProperties: false,
            properties: {
              humanRequestPhrases: { type: 'array', maxItems: 200, items: { type: 'string', minLength: 1, maxLength: 100 } },
              noReplySeconds: { type: 'integer', minimum: 1, maximum: 86_400 },
            },
          },
          tools: {
            type: 'array',
            items: {
              type: 'object',
              required: ['id', 'description', 'parameters', 'handler'],
              additionalProperties: false,
              properties: {
                id: { type: 'string', pattern: '^[A-Za-z0-9_-]{1,64}$' },
                description: { type: 'string', minLength: 1 },
                parameters: { type: 'object' },
                handler: { enum: BUILTIN_HANDLERS },
                timeoutMs: { type: 'integer', minimum: 1 },
              },
            },
          },
          assistant: {
            type: 'object',
            required: ['provider'],
            properties: { provider: { enum: ['scripted', 'openai'] } },
            allOf: [
              {
                if: { properties: { provider: { const: 'scripted' } } },
                then: {
                  type: 'object',
                  additionalProperties: false,
                  properties: {
                    provider: true,
                    greeting: { type: 'string' },
                    afterTool: { type: 'string' },
                    fallback: { type: 'string' },
                    chunkDelayMs: { type: 'integer', minimum: 0 },
                    rules: {
                      type: 'array',
                      items: {
                        type: 'object',
                        required: ['match'],
                        additionalProperties: false,
                        properties: {
                          match: { type: 'string', minLength: 1 },
                          reply: { type: 'string' },
                          tool: {
                            type: 'object',
                            required: ['id', 'args'],
                            additionalProperties: false,
                            properties: { id: { type: 'string' }, args: { type: 'object', additionalProperties: { type: 'string' } } },
                          },
                        },
                      },
                    },
                  },
                },
              },
              {
                if: { properties: { provider: { const: 'openai' } } },
                then: {
                  type: 'object',
                  required: ['baseUrl', 'model'],
                  additionalProperties: false,
                  properties: {
                    provider: true,
                    baseUrl: { type: 'string', format: 'uri' },
                    model: { type: 'string', minLength: 1 },
                    apiKeyEnv: { type: 'string', pattern: '^[A-Z_][A-Z0-9_]*$' },
                    systemPrompt: { type: 'string' },
                    temperature: { type: 'number', minimum: 0, maximum: 2 },
                    timeoutMs: { type: 'integer', minimum: 1 },
                  },
                },
              },
            ],
          },
        },
      },
    },
  },
}

export class CrewConfigError extends Error {
  override name = 'CrewConfigError'
}

/** Crews by id, with each tool's argument schema compiled once. */
export class CrewCatalog {
  private readonly byId = new Map<string, Crew>()
  private readonly toolSchemas: SchemaRegistry

  constructor(crews: Crew[]) {
    const toolGroup: Record<string, JsonSchema> = {}
    for (const crew of crews) {
      if (this.byId.has(crew.id)) throw new CrewConfigError(`crew "${crew.id}" is defined twice`)
      this.byId.set(crew.id, crew)
      const toolIds = new Set<string>()
      for (const tool of crew.tools) {
        if (toolIds.has(tool.id)) throw new CrewConfigError(`crew "${crew.id}": tool "${tool.id}" is defined twice`)
        toolIds.add(tool.id)
        toolGroup[toolKey(crew.id, tool.id)] = tool.parameters
      }
      for (const g of crew.guardrails ?? []) compilePattern(g.pattern, `crew "${crew.id}" guardrail "${g.id}"`)
      if (crew.assistant.provider === 'scripted') {
        for (const [i, rule] of (crew.assistant.rules ?? []).entries()) {
          compilePattern(rule.match, `crew "${crew.id}" rule ${i + 1}`)
          if (rule.tool && !toolIds.has(rule.tool.id)) throw new CrewConfigError(`crew "${crew.id}" rule ${i + 1}: unknown tool "${rule.tool.id}"`)
          if (!rule.tool && rule.reply === undefined) throw new CrewConfigError(`crew "${crew.id}" rule ${i + 1}: needs a reply or a tool`)
        }
      }
    }
    try {
      this.toolSchemas = new SchemaRegistry([toolGroup])
    } catch (error) {
      throw new CrewConfigError(`a tool's parameters are not a valid JSON Schema: ${(error as Error).message}`)
    }
  }

  get(crewId: string): Crew | undefined {
    return this.byId.get(crewId)
  }

  all(): Crew[] {
    return [...this.byId.values()]
  }

  /** Validates tool arguments against the tool's JSON Schema (issues name fields as `args.x`). */
  validateArgs(crewId: string, toolId: string, args: unknown): ValidationIssue[] {
    return this.toolSchemas.validate(toolKey(crewId, toolId), args, 'args')
  }
}

const toolKey = (crewId: string, toolId: string) => `tool:${crewId}:${toolId}`

function compilePattern(pattern: string, where: string) {
  try {
    new RegExp(pattern, 'i')
  } catch (error) {
    throw new CrewConfigError(`${where}: invalid pattern: ${(error as Error).message}`)
  }
}

const fileValidator = new SchemaRegistry([{ 'engine.crewsFile': crewsFileSchema }])

export function parseCrews(data: unknown, source = 'crews file'): CrewCatalog {
  const issues = fileValidator.validate('engine.crewsFile', data)
  if (issues.length) {
    throw new CrewConfigError(`${source} is invalid: ${issues.slice(0, 5).map(i => i.reason).join('; ')}`)
  }
  const crews = (data as { crews: Crew[] }).crews.map(c => ({ ...c, modifiers: c.modifiers ?? {} }))
  return new CrewCatalog(crews)
}

export function loadCrews(path: string): CrewCatalog {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (error) {
    throw new CrewConfigError(`CREWS_FILE ${path} cannot be read: ${(error as Error).message}`)
  }
  let data: unknown
  try {
    data = JSON.parse(text)
  } catch (error) {
    throw new CrewConfigError(`CREWS_FILE ${path} is not valid JSON: ${(error as Error).message}`)
  }
  return parseCrews(data, `CREWS_FILE ${path}`)
}

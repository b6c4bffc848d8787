// The console is a client of the public API only: every call here is one a supervisor could
// script. The API key lives in sessionStorage and goes in the apikey header, never in a URL.
export interface Auth {
  key: string
  userId: string
}

const STORAGE = 'switchboard.console'

export function loadAuth(): Auth | undefined {
  try {
    const raw = sessionStorage.getItem(STORAGE)
    return raw ? (JSON.parse(raw) as Auth) : undefined
  } catch {
    return undefined
  }
}
export const saveAuth = (a: Auth) => sessionStorage.setItem(STORAGE, JSON.stringify(a))
export const clearAuth = () => sessionStorage.removeItem(STORAGE)

export interface ApiResult {
  status: number
  body: any
}

export async function api(auth: Auth, method: string, path: string, body?: unknown): Promise<ApiResult> {
  const headers: Record<string, string> = { apikey: auth.key, UserId: auth.userId }
  if (body !== undefined) headers['content-type'] = 'application/json'
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await res.text()
  let parsed: any = text
  try {
    parsed = text ? JSON.parse(text) : undefined
  } catch {}
  return { status: res.status, body: parsed }
}

export interface SseOptions {
  /** The stream answered an error status: return true to stop for good (404: the session is gone). */
  onRefused?: (status: number) => boolean
  /** The stream is open (again): e.g. to reload what a reconnect may have missed. */
  onOpen?: () => void
}

/**
 * SSE over fetch (EventSource cannot send the apikey header); reconnects with Last-Event-ID
 * after a second, unless onRefused says the refusal is final. Returns the stop function.
 */
export function sse(auth: Auth, path: string, onEvent: (event: string, data: any) => void, options: SseOptions = {}): () => void {
  let stopped = false
  let lastId: string | undefined
  const controller = new AbortController()
  const stop = () => {
    stopped = true
    controller.abort()
  }
  const run = async () => {
    while (!stopped) {
      try {
        const headers: Record<string, string> = { apikey: auth.key, UserId: auth.userId, accept: 'text/event-stream' }
        if (lastId) headers['Last-Event-ID'] = lastId
        const res = await fetch(path, { headers, signal: controller.signal })
        if (!res.ok || !res.body) {
          if (options.onRefused?.(res.status)) return stop()
          throw new Error(String(res.status))
        }
        options.onOpen?.()
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
        let buffer = ''
        let event = 'message'
        let data = ''
        for (;;) {
          const { value, done } = await reader.read()
          if (done || stopped) break
          buffer += value
          let i: number
          while ((i = buffer.indexOf('\n')) >= 0) {
            const line = buffer.slice(0, i).replace(/\r$/, '')
            buffer = buffer.slice(i + 1)
            if (line === '') {
              if (data) {
                try {
                  onEvent(event, JSON.parse(data))
                } catch {}
              }
              event = 'message'
              data = ''
            } else if (line.startsWith('id:')) lastId = line.slice(3).trim()
            else if (line.startsWith('event:')) event = line.slice(6).trim()
            else if (line.startsWith('data:')) data += line.slice(5).trim()
          }
        }
      } catch {
        if (stopped) return
      }
      if (stopped) return
      await new Promise(r => setTimeout(r, 1000))
    }
  }
  void run()
  return stop
}

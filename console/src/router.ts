// URL routing over the History API, so a session or a filtered view has its own link, a reload
// keeps the place and back/forward work. Paths live under /console/ (the gateway answers the
// page for any of them): /console/sessions?q=&crew=&state=&agent=, /console/session/<id>,
// /console/dialer, /console/reports?report=&crew=&from=&to=&tz=&group=.
import { useEffect, useState } from 'preact/hooks'

export const BASE = '/console/'

export interface Route {
  view: 'sessions' | 'session' | 'dialer' | 'reports'
  sessionId?: string
  params: URLSearchParams
}

export function parse(loc: { pathname: string; search: string } = location): Route {
  const rest = loc.pathname.startsWith(BASE) ? loc.pathname.slice(BASE.length) : ''
  const [head, id] = rest.split('/')
  const params = new URLSearchParams(loc.search)
  if (head === 'session' && id) return { view: 'session', sessionId: decodeURIComponent(id), params }
  if (head === 'dialer' || head === 'reports') return { view: head, params }
  return { view: 'sessions', params }
}

const listeners = new Set<() => void>()

/** Goes to a console path (relative to /console/); `replace` for filter edits, so back skips them. */
export function navigate(path: string, replace = false) {
  const url = BASE + path.replace(/^\//, '')
  if (url === location.pathname + location.search) return
  if (replace) history.replaceState(null, '', url)
  else history.pushState(null, '', url)
  for (const l of listeners) l()
}

/** A path with its query, without empty parameters. */
export function withQuery(path: string, query: Record<string, string | undefined>) {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(query)) if (v) q.set(k, v)
  const s = q.toString()
  return s ? `${path}?${s}` : path
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parse())
  useEffect(() => {
    const update = () => setRoute(parse())
    listeners.add(update)
    addEventListener('popstate', update)
    return () => {
      listeners.delete(update)
      removeEventListener('popstate', update)
    }
  }, [])
  return route
}

// The operator console: sign-in, the floor (live numbers, sessions, search and filters), one
// session (transcript, presence, actions), dialer batches, reports. Every call is one of the
// public API (a supervisor can script the same); the URL holds the place (router.ts).
// Everything user-supplied is rendered as text (Preact escapes it); nothing is set as HTML.
import { render } from 'preact'
import { useState } from 'preact/hooks'
import 'uplot/dist/uPlot.min.css'
import './style.css'
import { api, type Auth, clearAuth, loadAuth, saveAuth } from './api'
import { Dialer } from './dialer'
import { ADMIN, stopFloor, useFloor, useNow } from './floor'
import { Reports } from './reports'
import { navigate, useRoute } from './router'
import { Session } from './session'
import { Sessions } from './sessions'

function SignIn({ onAuth }: { onAuth: (a: Auth) => void }) {
  const [key, setKey] = useState('')
  const [userId, setUserId] = useState('')
  const [error, setError] = useState('')
  const submit = async (e: Event) => {
    e.preventDefault()
    const auth = { key: key.trim(), userId: userId.trim() }
    const res = await api(auth, 'GET', `${ADMIN}/sessions?limit=1`)
    if (res.status === 401) return setError('Unknown API key')
    if (res.status === 400) return setError(res.body?.message ?? 'Invalid supervisor id')
    saveAuth(auth)
    onAuth(auth)
  }
  return (
    <form class="signin" onSubmit={submit}>
      <h1>Switchboard console</h1>
      <label>
        API key <input type="password" name="apikey" autocomplete="off" required value={key} onInput={e => setKey((e.target as HTMLInputElement).value)} />
      </label>
      <label>
        Supervisor id (UserId) <input name="userid" required maxLength={128} value={userId} onInput={e => setUserId((e.target as HTMLInputElement).value)} />
      </label>
      <button type="submit">Sign in</button>
      {error && <p role="alert" class="error">{error}</p>}
    </form>
  )
}

function Console({ auth, signOut }: { auth: Auth; signOut: () => void }) {
  const route = useRoute()
  const floor = useFloor(auth)
  const now = useNow()
  const crews = [...new Set([...floor.rows.values()].map(r => r.crewId))].sort()
  const link = (view: 'sessions' | 'dialer' | 'reports') => (
    <a href={`/console/${view}`} aria-current={route.view === view ? 'page' : undefined} onClick={e => (e.preventDefault(), navigate(view))}>{view}</a>
  )
  return (
    <div class="app">
      <header>
        <strong>Switchboard</strong>
        <nav aria-label="Views">{link('sessions')}{link('dialer')}{link('reports')}</nav>
        <span class="who">{auth.userId}</span>
        <button onClick={signOut}>Sign out</button>
      </header>
      <main>
        {route.view === 'session' && route.sessionId ? (
          <Session auth={auth} id={route.sessionId} floor={floor} now={now} key={route.sessionId} />
        ) : route.view === 'dialer' ? (
          <Dialer auth={auth} />
        ) : route.view === 'reports' ? (
          <Reports auth={auth} route={route} crews={crews} />
        ) : (
          <Sessions auth={auth} floor={floor} route={route} now={now} />
        )}
      </main>
    </div>
  )
}

function App() {
  const [auth, setAuth] = useState(loadAuth())
  if (!auth) return <SignIn onAuth={setAuth} />
  return <Console auth={auth} signOut={() => (stopFloor(), clearAuth(), setAuth(undefined))} />
}

render(<App />, document.getElementById('app')!)

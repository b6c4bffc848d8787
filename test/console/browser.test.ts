// The operator console end to end in a real browser: Debian's chromium (/usr/bin/chromium,
// installed by .ci/system-deps.sh) driven by playwright-core, against a real service process
// on loopback, each point checked against what the HTTP API says. Takes the screenshots shown
// in console/README.md at 1280 and 390 px: into docs/screenshots/ with UPDATE_SCREENSHOTS=1,
// else into a temporary folder (a test run leaves the work tree as it was).
import t from 'tap'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium, type BrowserContext, type Page } from 'playwright-core'
import { ensureConsoleBuilt } from './build.js'
import { call, eventually, KEYS, startTestService } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession } from '../support/sse.js'
import { crewsFile } from '../engine/fixtures/crews.js'

const CHROMIUM = '/usr/bin/chromium'
const root = fileURLToPath(new URL('../../', import.meta.url))
const shots = process.env.UPDATE_SCREENSHOTS === '1' ? `${root}docs/screenshots` : mkdtempSync(join(tmpdir(), 'sb-shots-'))
const SUPERVISOR = 'sup-ana'
const SESSIONS = '/engine/api/administration/sessions'
const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))

async function browser(t: Tap.Test, width = 1280, height = 800): Promise<BrowserContext> {
  const profile = mkdtempSync(join(tmpdir(), 'sb-chromium-'))
  t.teardown(() => rmSync(profile, { recursive: true, force: true }))
  // A temporary profile (the --user-data-dir), never a downloaded browser.
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width, height },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  t.teardown(() => context.close())
  return context
}

async function signIn(page: Page, base: string, userId: string) {
  await page.goto(`${base}/console/`)
  await page.getByLabel('API key').fill(KEYS.acme)
  await page.getByLabel('Supervisor id (UserId)').fill(userId)
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Live sessions' }).waitFor()
}

t.test('a supervisor works the floor: live numbers, search and links, the transcript, presence, safe actions, keyboard, reports, a phone', { skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (make test-deps)` }, async t => {
  await ensureConsoleBuilt()
  // Replies stream word by word (as a model's do), so the "writing" state can be seen.
  const demo = JSON.parse(readFileSync(`${root}config/crews.json`, 'utf8')).crews.find((c: any) => c.id === 'demo')
  const crews = crewsFile({ patchDemo: { assistant: { ...demo.assistant, chunkDelayMs: 250 } } })
  const svc = await startTestService(t, { env: { CREWS_FILE: crews, ENGINE_RECORD_FLUSH_MS: '500' } })
  const api = (method: string, path: string, body?: unknown) => call(svc.base, method, path, { headers: { UserId: 'auditor' }, body })
  const listed = async () => (await api('GET', SESSIONS)).json.data as any[]
  const context = await browser(t)
  const page = await context.newPage()
  const foreign: string[] = []
  const requests: string[] = []
  page.on('request', r => {
    requests.push(r.url())
    if (!r.url().startsWith(svc.base) && !r.url().startsWith('data:')) foreign.push(r.url())
  })
  const errors: string[] = []
  page.on('pageerror', e => errors.push(String(e)))
  t.teardown(() => void (errors.length && console.error('page errors:', errors)))

  // First render: the sign-in form, then the session list once signed in.
  const t0 = Date.now()
  await page.goto(`${svc.base}/console/`)
  await page.getByLabel('API key').waitFor()
  const firstRender = Date.now() - t0
  t.comment(`first render ${firstRender} ms`)
  t.ok(firstRender < 5000, `the sign-in page renders within a few seconds (${firstRender} ms; the budget is 1 s, measured, not asserted tight)`)
  await page.getByLabel('API key').fill(KEYS.acme)
  await page.getByLabel('Supervisor id (UserId)').fill(SUPERVISOR)
  const t1 = Date.now()
  await page.keyboard.press('Enter')
  await page.getByRole('table', { name: 'Sessions' }).waitFor()
  t.comment(`session list shown ${Date.now() - t1} ms after sign-in`)
  t.notOk(page.url().includes(KEYS.acme), 'the key is not in the URL')

  // --- New sessions appear live; the flagged one first; acknowledged from the page.
  const listingsBefore = requests.filter(url => new URL(url).pathname === SESSIONS).length
  const s = await createSession(svc.base, { body: { arguments: { name: '<img src=x onerror=alert(1)> Ana Ruiz', phone: '+34600111222' } } })
  t.teardown(() => s.stream.close())
  const created = Date.now()
  const row = page.locator(`table[aria-label="Sessions"] tr[data-session="${s.sessionId}"]`)
  await row.waitFor({ timeout: 15_000 })
  t.comment(`listed ${Date.now() - created} ms after its creation`)
  // Live: the row came from the lifecycle feed; the page did not list the sessions again for it.
  t.equal(requests.filter(url => new URL(url).pathname === SESSIONS).length, listingsBefore, 'the new session is listed from the feed, without listing again')
  await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: '<b>hello</b> I need help' } })
  const quiet = await createSession(svc.base, { body: { arguments: { name: 'Luis Gómez', email: 'luis@example.com' } } })
  t.teardown(() => quiet.stream.close())
  const doomed = await createSession(svc.base, { body: { arguments: { name: 'Closed Carla' } } })
  await page.locator(`tr[data-session="${quiet.sessionId}"]`).waitFor()
  await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'can I talk to a human?' } })
  const asked = row.locator('.flag[data-reason="human_requested"]')
  await asked.waitFor({ timeout: 15_000 })
  t.equal(await page.locator('table[aria-label="Sessions"] tbody tr').first().getAttribute('data-session'), s.sessionId, 'the flagged session is listed first')

  // --- Live numbers against the API; closed sessions are not counted live and are set apart.
  t.equal((await api('DELETE', `/engine/api/administration/session/${doomed.sessionId}`)).status, 204)
  doomed.stream.close()
  await page.locator(`table[aria-label="Recently closed sessions"] tr[data-session="${doomed.sessionId}"] .end-reason`, { hasText: 'admin_destroyed' }).waitFor({ timeout: 15_000 })
  t.equal(await page.locator(`table[aria-label="Sessions"] tr[data-session="${doomed.sessionId}"]`).count(), 0, 'a closed session leaves the live list')
  const fromApi = await listed()
  const liveApi = fromApi.filter(r => r.live)
  const figure = (name: string) => page.locator(`.tile[data-figure="${name}"] .tile-value`).textContent()
  await page.locator('.tile[data-figure="Live"] .tile-value', { hasText: String(liveApi.length) }).waitFor()
  t.equal(await figure('Live'), String(liveApi.length), 'Live = the listing\'s live sessions')
  t.equal(await figure('Paused'), String(liveApi.filter(r => r.state === 'paused').length), 'Paused = the listing\'s paused sessions')
  t.equal(await figure('Flagged'), '1', 'Flagged = sessions with an unacknowledged flag')
  await page.locator('.status', { hasText: `${liveApi.length} live sessions` }).waitFor()
  t.match(await page.locator('.status').textContent(), `live · ${liveApi.length} live sessions`, 'the live counter counts live sessions only')
  await page.locator('.tile[data-figure="Avg handle time"] .tile-note', { hasText: '1 ended' }).waitFor({ timeout: 15_000 })
  const demoRow = page.locator('table.breakdown tr[data-group="demo"]')
  t.equal(await demoRow.locator('td').nth(1).textContent(), String(liveApi.filter(r => r.crewId === 'demo').length), 'per crew: live sessions of the crew')
  await page.screenshot({ path: `${shots}/console-sessions-1280.png`, fullPage: true })

  await asked.getByRole('button', { name: /^Acknowledge/ }).click()
  await asked.waitFor({ state: 'detached' })
  const listedFlag = (await listed()).find(r => r.sessionId === s.sessionId).attention.find((f: any) => f.reason === 'human_requested')
  t.match(listedFlag, { acknowledged: true, acknowledgedBy: SUPERVISOR }, 'acknowledged from the page, by this supervisor')

  // --- Find and share: search by customer name, by id prefix; the URL holds it; reload; back.
  await page.keyboard.press('/')
  t.equal(await page.evaluate(() => (document.activeElement as HTMLInputElement).type), 'search', '/ focuses the search')
  await page.keyboard.type('luis')
  await page.locator('table[aria-label="Sessions"] tbody tr').nth(1).waitFor({ state: 'detached' })
  t.same(await page.locator('table[aria-label="Sessions"] tbody tr').evaluateAll(rows => rows.map(r => r.getAttribute('data-session'))), [quiet.sessionId], 'customer name search')
  t.match(page.url(), /\/console\/sessions\?q=luis$/, 'the search is in the URL')
  await page.reload()
  await page.locator(`table[aria-label="Sessions"] tr[data-session="${quiet.sessionId}"]`).waitFor()
  t.equal(await page.locator('table[aria-label="Sessions"] tbody tr').count(), 1, 'a reload keeps the filtered view')
  t.equal(await page.getByRole('searchbox').inputValue(), 'luis')
  await page.getByRole('searchbox').fill(s.sessionId.slice(0, 6))
  await page.getByLabel('State').selectOption('flagged')
  await page.locator('table[aria-label="Sessions"] tbody tr').first().waitFor({ state: 'detached' }).catch(() => {})
  t.equal(await page.locator('table[aria-label="Sessions"] tbody tr').count(), 0, 'filters combine: that id prefix has no unacknowledged flag now')
  await page.getByLabel('State').selectOption('live')
  await page.getByRole('searchbox').fill('+3460011')
  await row.waitFor()
  t.equal(await page.locator('table[aria-label="Sessions"] tbody tr').count(), 1, 'address search')
  await page.getByRole('searchbox').fill('')
  await page.locator('table[aria-label="Sessions"] tbody tr').nth(1).waitFor()

  // --- Keyboard: j/k move, Enter opens; the session has its own link.
  await page.locator('body').click({ position: { x: 5, y: 5 } })
  await page.keyboard.press('?')
  await page.getByRole('complementary', { name: 'Keyboard shortcuts' }).waitFor()
  t.match(await page.getByRole('complementary', { name: 'Keyboard shortcuts' }).textContent(), /acknowledge/, 'the shortcut list is visible')
  await page.keyboard.press('?')
  const order = await page.locator('table[aria-label="Sessions"] tbody tr').evaluateAll(rows => rows.map(r => r.getAttribute('data-session')))
  const target = order.indexOf(s.sessionId)
  for (let i = 0; i < target; i++) await page.keyboard.press('j')
  for (const key of target > 0 ? ['k', 'j'] : ['j', 'k']) await page.keyboard.press(key)
  t.equal(await page.locator('tr.selected').getAttribute('data-session'), s.sessionId, 'j/k select the row')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: `Session ${s.sessionId}` }).waitFor()
  t.match(page.url(), `/console/session/${s.sessionId}`, 'the session has its own URL')

  // --- The transcript: speaker-styled turns with times; HTML is text.
  await page.locator('.transcript .turn.customer', { hasText: '<b>hello</b> I need help' }).waitFor()
  await page.locator('.transcript .turn.assistant', { hasText: 'Hello! How can I help you today?' }).waitFor()
  t.equal(await page.locator('.transcript b').count(), 0, 'user text is rendered as text, never as HTML')
  t.ok(await page.locator('.transcript .turn.customer time').count(), 'turns carry their time')
  t.match(await page.locator('.meta .customer').textContent(), '<img src=x onerror=alert(1)> Ana Ruiz', 'the customer named as text')
  // The assistant's reply streams: "writing…" with the words so far, then the turn.
  await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'what are the opening hours of the shop' } })
  await page.locator('.transcript .writing .typing', { hasText: 'writing' }).waitFor({ timeout: 15_000 })
  await page.locator('.transcript .writing p', { hasText: 'You said' }).waitFor({ timeout: 15_000 })
  await page.locator('.transcript .turn.assistant', { hasText: 'You said: what are the opening hours of the shop' }).waitFor({ timeout: 10_000 })
  await page.locator('.transcript .writing').waitFor({ state: 'detached' })

  // --- Presence: a second supervisor opens the same session; both pages and the list show it.
  const other = await (await browser(t)).newPage()
  await signIn(other, svc.base, 'sup-bob')
  await other.goto(`${svc.base}/console/session/${s.sessionId}`)
  await other.getByRole('heading', { name: `Session ${s.sessionId}` }).waitFor()
  const seenAt = Date.now()
  // Pushed by the watch stream: the page does not reload or poll for it.
  await page.locator('.session-watchers', { hasText: 'sup-bob' }).waitFor({ timeout: 15_000 })
  t.comment(`the other supervisor shows on this page ${Date.now() - seenAt} ms after opening it`)
  t.same((await listed()).find(r => r.sessionId === s.sessionId).watchers, ['sup-ana', 'sup-bob'], 'as the API lists them')
  await other.locator('.session-watchers', { hasText: SUPERVISOR }).waitFor({ timeout: 15_000 })
  // Back on the list (no reload), the other supervisor sees presence in the Watching column.
  await other.goBack()
  await other.getByRole('heading', { name: 'Live sessions' }).waitFor()
  await other.locator(`tr[data-session="${s.sessionId}"] td.watchers`, { hasText: SUPERVISOR }).waitFor({ timeout: 15_000 })
  t.notMatch(await other.locator(`tr[data-session="${s.sessionId}"] td.watchers`).textContent(), 'sup-bob', 'leaving the session page leaves the presence')

  // --- One composer per action: a whisper empties its box and leaves the others empty.
  await page.getByLabel('Whisper to the assistant').fill('Offer the gold plan discount')
  await page.getByRole('button', { name: 'Whisper', exact: true }).click()
  await page.getByText('Whisper: done (200)').waitFor()
  await page.locator('.transcript .turn.whisper', { hasText: 'Offer the gold plan discount' }).waitFor()
  t.equal(await page.getByLabel('Whisper to the assistant').inputValue(), '', 'the whisper box is emptied once sent')
  t.equal(await page.getByLabel('Reply as the assistant').inputValue(), '', 'the impersonate box never had the whisper')
  t.ok(await page.getByRole('button', { name: 'Impersonate' }).isDisabled(), 'Impersonate is disabled while its box is empty')
  // Impersonate asks first, naming what the customer will receive; Cancel sends nothing.
  await page.getByLabel('Reply as the assistant').fill('We can offer 20% off today')
  await page.getByRole('button', { name: 'Impersonate' }).click()
  const dialog = page.getByRole('alertdialog')
  t.match(await dialog.textContent(), /The customer receives, as the assistant's reply: “We can offer 20% off today”/, 'the confirmation names the consequence')
  await page.screenshot({ path: `${shots}/console-session-confirm-1280.png` })
  await dialog.getByRole('button', { name: 'Cancel' }).click()
  await sleep(300)
  const history = async () => (await api('GET', `${ADMIN}/${s.sessionId}/history`)).json.data as any[]
  t.notOk((await history()).some(e => e.text === 'We can offer 20% off today'), 'cancelled: nothing sent')
  await page.getByRole('button', { name: 'Impersonate' }).click()
  await dialog.getByRole('button', { name: 'Yes, impersonate' }).click()
  await page.locator('.transcript .turn.impersonated', { hasText: 'We can offer 20% off today' }).waitFor()
  t.ok((await history()).some(e => e.type === 'message.assistant' && e.source === 'impersonated' && e.userId === SUPERVISOR), 'sent once confirmed')
  // Integrator-only fields wait behind "Advanced".
  t.notOk(await page.getByLabel('Correlation id').isVisible(), 'the correlation id is behind the advanced disclosure')

  // Transfer asks first; then the agent changes.
  await page.getByLabel('Transfer to').selectOption('support')
  await page.getByRole('button', { name: 'Transfer' }).click()
  t.match(await dialog.textContent(), /Agent support takes the conversation from general/)
  await dialog.getByRole('button', { name: 'Yes, transfer' }).click()
  await page.getByText('Transfer: done (200)').waitFor()
  await page.locator('.transcript .system', { hasText: 'Transferred from general to support' }).waitFor()
  await page.locator('.session-agent', { hasText: 'support' }).waitFor()
  t.ok((await history()).some(e => e.type === 'agent.transferred' && e.userId === SUPERVISOR && e.to === 'support'), 'the transfer is in the history')

  // Buttons as the state allows: Pause only while active, Resume only while paused.
  t.ok(await page.getByRole('button', { name: 'Resume' }).isDisabled(), 'Resume is disabled while active')
  await page.getByRole('button', { name: 'Pause' }).click()
  await page.locator('.session-state', { hasText: 'paused' }).waitFor()
  t.ok(await page.getByRole('button', { name: 'Pause' }).isDisabled(), 'Pause is disabled while paused')
  t.equal((await listed()).find(r => r.sessionId === s.sessionId).state, 'paused', 'paused in the API')
  await page.getByRole('button', { name: 'Resume' }).click()
  await page.locator('.session-state', { hasText: 'active' }).waitFor()

  // --- Follow the newest: it follows at the bottom, stops when the supervisor scrolls up.
  for (let i = 0; i < 14; i++) await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: `hello number ${i}` } })
  await page.locator('.transcript .turn.customer', { hasText: 'hello number 13' }).waitFor({ timeout: 10_000 })
  await page.locator('.transcript .turn.assistant').last().waitFor()
  await sleep(300)
  const atBottom = () => page.locator('.transcript').evaluate(el => el.scrollHeight - el.scrollTop - el.clientHeight < 40)
  t.ok(await atBottom(), 'the transcript follows the newest entry')
  await page.locator('.transcript').evaluate(el => (el.scrollTop = 0))
  await page.getByRole('button', { name: /Newest|new/ }).waitFor()
  await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hi again after scrolling' } })
  await page.locator('.transcript .turn.customer', { hasText: 'hi again after scrolling' }).waitFor()
  t.equal(await page.locator('.transcript').evaluate(el => el.scrollTop), 0, 'scrolled up: it stays where the supervisor is')
  await page.getByRole('button', { name: /new/ }).click()
  await sleep(200)
  t.ok(await atBottom(), 'the jump button goes back to the newest')
  await page.screenshot({ path: `${shots}/console-session-1280.png`, fullPage: true })

  // --- Destroy: asked first; then the page says it ended, every action is off, no more polling.
  await page.getByRole('button', { name: 'Destroy' }).click()
  t.match(await dialog.textContent(), /ends now for the customer/)
  await dialog.getByRole('button', { name: 'Yes, destroy' }).click()
  await page.locator('.ended', { hasText: 'admin_destroyed' }).waitFor({ timeout: 15_000 })
  await page.locator('.session-state', { hasText: /completed|ended/ }).waitFor()
  for (const name of ['Whisper', 'Impersonate', 'Append', 'Attend', 'Transfer', 'Pause', 'Resume', 'Destroy']) {
    t.ok(await page.getByRole('button', { name, exact: true }).isDisabled(), `${name} is disabled once ended`)
  }
  await sleep(500)
  const before = requests.filter(u => u.includes(s.sessionId)).length
  await sleep(3000)
  const after = requests.filter(u => u.includes(s.sessionId)).length
  t.equal(after - before, 0, 'the page stops asking about a destroyed session')
  await other.locator(`table[aria-label="Recently closed sessions"] tr[data-session="${s.sessionId}"]`).waitFor({ timeout: 15_000 })

  // --- Back and forward through the history of the page.
  await page.goBack()
  await page.getByRole('heading', { name: 'Live sessions' }).waitFor()
  await page.goForward()
  await page.getByRole('heading', { name: `Session ${s.sessionId}` }).waitFor()
  await page.locator('.ended').waitFor()
  await page.goBack()
  await page.getByRole('heading', { name: 'Live sessions' }).waitFor()

  // --- A phone: the essential columns stay.
  await page.setViewportSize({ width: 390, height: 844 })
  const visibleHeads = await page.locator('table[aria-label="Sessions"] th').evaluateAll(ths => ths.filter(th => (th as HTMLElement).offsetParent !== null).map(th => th.textContent))
  t.same(visibleHeads, ['Session', 'State', 'Attention', 'Last activity'], 'at 390 px: session, state, flag, last activity')
  t.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 400), 'no sideways scrolling at 390 px')
  await page.screenshot({ path: `${shots}/console-sessions-390.png`, fullPage: true })
  await page.goto(`${svc.base}/console/session/${quiet.sessionId}`)
  await page.locator('.transcript .system', { hasText: 'Session opened' }).waitFor()
  const opened = Date.now()
  await other.locator(`tr[data-session="${quiet.sessionId}"] td.watchers`, { hasText: SUPERVISOR }).waitFor({ timeout: 15_000 })
  t.comment(`presence in the other supervisor's list after ${Date.now() - opened} ms`)
  t.pass('presence shows live in the other supervisor\'s list')
  await page.screenshot({ path: `${shots}/console-session-390.png`, fullPage: true })
  await page.setViewportSize({ width: 1280, height: 800 })

  // --- Reports: chosen from the definitions; counts and durations on charts of their own.
  await page.getByRole('link', { name: 'reports' }).click()
  await page.locator('.chart-count canvas').waitFor({ timeout: 5000 })
  await page.locator('.chart-duration canvas').waitFor({ timeout: 5000 })
  const defs = (await call(svc.base, 'GET', '/engine/v1/api/reports/definitions')).json.data as any[]
  t.same(await page.locator('select[name="report"] option').evaluateAll(os => os.map(o => (o as HTMLOptionElement).value)), defs.map(d => d.id), 'reports from the definitions API')
  t.ok((await page.locator('.chart-duration .u-legend .u-series').count()) >= 2, 'the durations chart has its series')
  t.notOk(await page.locator('.chart-count .u-legend').textContent().then(s => /DurationMs/.test(s ?? '')), 'no duration on the counts chart')
  const swatch = page.locator('table.report-values th .swatch').first()
  t.ok(await swatch.getAttribute('data-colour'), 'each series has its colour beside its values')
  await page.getByLabel('Time zone').selectOption('America/New_York')
  await page.waitForURL(/tz=America%2FNew_York/)
  await page.getByLabel('Group by').selectOption('day')
  await page.locator('table.report-values tbody tr').first().waitFor()
  await page.getByLabel('Range').selectOption('7d')
  await page.waitForURL(/range=7d/)
  await page.screenshot({ path: `${shots}/console-reports-1280.png`, fullPage: true })
  // sessions-detail as a table in the chosen zone, and its CSV export holds exactly the rows shown.
  await page.getByRole('button', { name: 'Load sessions detail' }).click()
  const detailRow = page.locator(`.sessions-detail tr[data-row="${s.sessionId}"]`)
  await detailRow.waitFor()
  const startShown = await detailRow.locator('td').nth(4).textContent()
  const startApi = (await listed()).find(r => r.sessionId === s.sessionId)?.startTime ?? fromApi.find(r => r.sessionId === s.sessionId).startTime
  const newYork = new Intl.DateTimeFormat('sv-SE', { timeZone: 'America/New_York', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false }).format(startApi)
  t.equal(startShown, newYork, 'the table shows times in the chosen zone')
  const shownRows = await page.locator('.sessions-detail tbody tr').count()
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export CSV' }).click()])
  const lines = readFileSync((await download.path())!, 'utf8').trim().split('\r\n')
  t.equal(lines[0], 'session_id,crew_id,agent_id,status,start_time,end_time,duration,messages,user_messages,assistant_messages,tool_calls,transfers,end_reason')
  t.equal(lines.length - 1, shownRows, 'one CSV line per row shown')
  t.ok(lines.some(l => l.startsWith(`${s.sessionId},demo,`)), 'the session is in the export')
  await page.reload()
  await page.getByLabel('Time zone').waitFor()
  t.equal(await page.getByLabel('Time zone').inputValue(), 'America/New_York', 'a reload keeps the report settings')

  t.same(foreign, [], 'no request leaves the origin')
  t.same(errors, [], 'no page error')
  const stored = await page.evaluate(() => sessionStorage.getItem('switchboard.console'))
  t.match(stored, SUPERVISOR, 'the sign-in is kept in sessionStorage')
  void eventually
})

// Counts the test points in tap's output below the per-file level (subtests and assertions)
// and prints "N passed, N failed" as the last line. Above it, every failed point with the
// chain of subtests it sits in, so a CI log cut to its tail still says what failed.
import { readFileSync } from 'node:fs'
const text = readFileSync(process.argv[2], 'utf8')
let passed = 0
let failed = 0
let skipped = 0
const failures = []
// The subtest names open at each indentation depth ("# Subtest: name" precedes its points).
const open = []
const lines = text.split('\n')
for (let i = 0; i < lines.length; i++) {
  const line = lines[i]
  const sub = /^(\s*)# Subtest: (.*)$/.exec(line)
  if (sub) {
    const depth = sub[1].length / 4
    open.length = depth
    open[depth] = sub[2]
    continue
  }
  const m = /^(\s*)(not ok|ok) \d+ (?:- )?(.*)$/.exec(line)
  if (!m) continue
  const depth = m[1].length / 4
  if (m[2] === 'not ok') failures.push({ name: [...open.slice(0, depth), m[3]].join(' > '), diag: diagnostic(i) })
  // A file-level point only matters when the file itself failed (crash, timeout).
  if (m[1] === '') {
    if (m[2] === 'not ok') failed++
    continue
  }
  // Every indented point: subtests and the assertions inside them.
  if (/# SKIP|# TODO/.test(line)) skipped++
  else if (m[2] === 'ok') passed++
  else failed++
}
// The YAML block right after a point ("  ---" ... "  ..."), at most 12 lines of it.
function diagnostic(at) {
  if (!/^\s*---$/.test(lines[at + 1] ?? '')) return []
  const block = []
  for (let j = at + 2; j < lines.length && !/^\s*\.\.\.$/.test(lines[j]); j++) block.push(lines[j])
  return block.slice(0, 12)
}
if (passed + failed === 0 && /not ok|# fail/.test(text)) failed = 1
if (failures.length) {
  // The first assertions' diagnostics (found, wanted, where), then every failed point's name:
  // the names last, so a log cut to its last lines keeps them.
  for (const f of failures.filter((f) => f.diag.length).slice(0, 2)) console.log(`${f.name}\n${f.diag.join('\n')}`)
  console.log('failed:')
  for (const f of failures.slice(0, 12)) console.log(`  ${f.name}`)
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`)

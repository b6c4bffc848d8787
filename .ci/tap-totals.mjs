// Counts the test points in tap's output below the per-file level (subtests and assertions)
// and prints "N passed, N failed".
import { readFileSync } from 'node:fs'
const text = readFileSync(process.argv[2], 'utf8')
let passed = 0
let failed = 0
let skipped = 0
for (const line of text.split('\n')) {
  const m = /^(\s*)(not ok|ok) \d+/.exec(line)
  if (!m) continue
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
if (passed + failed === 0 && /not ok|# fail/.test(text)) failed = 1
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`)

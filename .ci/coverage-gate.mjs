// Fails the build when line coverage drops below the given percentage (tap itself only knows
// "100% or nothing"; this is the honest middle).
import { readFileSync } from 'node:fs'
const min = Number(process.argv[2] ?? 75)
const summary = JSON.parse(readFileSync('.tap/report/coverage-summary.json', 'utf8'))
const pct = summary.total.lines.pct
console.log(`line coverage ${pct}% (gate ${min}%)`)
if (pct < min) {
  console.error(`coverage gate failed: ${pct}% < ${min}%`)
  process.exit(1)
}

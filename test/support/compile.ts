// Type-level tests: a fixture compiled with the project's compiler options; the lines the
// compiler refuses, to compare with the lines the fixture marks `// REFUSED`.
import ts from 'typescript'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

export function refusedLines(fixture: string): { refused: number[]; marked: number[] } {
  const config = ts.readConfigFile(fileURLToPath(new URL('../../tsconfig.json', import.meta.url)), ts.sys.readFile)
  const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, fileURLToPath(new URL('../..', import.meta.url)))
  const program = ts.createProgram([fixture], { ...options, noEmit: true })
  const refused = ts
    .getPreEmitDiagnostics(program)
    .filter(d => d.file?.fileName === fixture)
    .map(d => d.file!.getLineAndCharacterOfPosition(d.start!).line + 1)
  const marked = readFileSync(fixture, 'utf8')
    .split('\n')
    .flatMap((line, i) => (line.includes('// REFUSED') ? [i + 1] : []))
  return { refused: [...new Set(refused)].sort((a, b) => a - b), marked }
}

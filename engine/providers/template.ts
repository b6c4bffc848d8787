// Tiny, safe templates for scripted replies: {{name}}, {{a.b}}, {{name|default}}. Values are
// looked up in a plain object; there is no code execution.
export function render(template: string, vars: Record<string, unknown>): string {
  return template.replace(/\{\{\s*([A-Za-z0-9_.$]+)(?:\|([^}]*))?\s*\}\}/g, (_m, path: string, fallback?: string) => {
    let value: any = vars
    for (const part of path.split('.')) value = value === null || value === undefined ? undefined : value[part]
    if (value === undefined || value === null || value === '') return fallback ?? ''
    if (typeof value === 'object') return JSON.stringify(value)
    return String(value)
  })
}

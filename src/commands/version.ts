// The package's version, from its package.json: two levels up from src/commands/ and from
// dist/commands/ alike, so a build and a source run report the same.
import { readFileSync } from 'node:fs'

export function version(): string {
  return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version
}

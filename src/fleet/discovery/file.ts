// Instances from a YAML or JSON file, re-read when it changes. The directory is watched,
// not the file: editors save by writing a new file and renaming it over the old one (and
// Kubernetes swaps a ConfigMap volume's symlink), which a watch on the old inode misses.
import { watch, type FSWatcher } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { dirname, resolve } from 'node:path'
import { parse as parseYaml } from 'yaml'
import { Instance } from '../../config/config.js'
import type { Role } from '../../config/disaggregation.js'
import type { FileSourceConfig } from '../../config/discovery.js'
import { DiscoveryError, type DiscoverySource, type InstanceEntry } from './source.js'

/**
 * Parses the file's text: the list, or an error that says where it is wrong. An entry without
 * a `role` of its own takes `role` (the source's), when one is given.
 */
export function parseInstanceFile(path: string, text: string, role?: Role): InstanceEntry[] {
  let raw: unknown
  try {
    raw = path.endsWith('.json') ? JSON.parse(text) : parseYaml(text)
  } catch (err) {
    throw new DiscoveryError(`'${path}' is not valid ${path.endsWith('.json') ? 'JSON' : 'YAML'}: ${(err as Error).message}`)
  }
  const what = `'${path}' must hold a list of instances (URLs or {url, weight, models, role})`
  if (!Array.isArray(raw)) throw new DiscoveryError(`${what}; got ${raw === null ? 'nothing' : typeof raw}`)
  const problems: string[] = []
  const list: InstanceEntry[] = []
  raw.forEach((item: unknown, i) => {
    // Each entry against the form it has (a URL, or an object), for a message about that form.
    const form = typeof item === 'string' ? Instance.options[0] : Instance.options[1]
    const r = form.safeParse(item)
    const ownRole = item !== null && typeof item === 'object' && 'role' in item
    if (r.success) list.push(ownRole || role === undefined ? r.data : { ...r.data, role })
    else {
      for (const issue of r.error.issues) {
        const at = issue.path.map((k) => (typeof k === 'number' ? `[${k}]` : `.${String(k)}`)).join('')
        const got = issue.path.reduce<unknown>((v, k) => (v !== null && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[k] : undefined), item)
        const shown = got === undefined || typeof got === 'object' || issue.message.includes('; got ') ? '' : `; got ${JSON.stringify(got)}`
        problems.push(`[${i}]${at}: ${issue.message}${shown}`)
      }
    }
  })
  if (problems.length > 0) throw new DiscoveryError(`${what}: ${problems.join('; ')}`)
  return list
}

export class FileSource implements DiscoverySource {
  readonly #path: string
  readonly #role: Role | undefined
  #watcher: FSWatcher | undefined
  #timer: NodeJS.Timeout | undefined
  #last: string | undefined
  #lastBad: string | undefined
  #stopped = false

  constructor(cfg: FileSourceConfig) {
    this.#path = resolve(cfg.path)
    this.#role = cfg.role
  }

  start(onChange: (list: InstanceEntry[]) => void, onError: (err: Error) => void): void {
    const read = async () => {
      let text: string
      try {
        text = await readFile(this.#path, 'utf8')
      } catch (err) {
        this.#last = undefined // the same list back is an answer again
        return onError(new DiscoveryError(`cannot read '${this.#path}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`))
      }
      // The text last applied, or the bad text last reported: nothing new to say about either.
      if (this.#stopped || text === this.#last || text === this.#lastBad) return
      let list: InstanceEntry[]
      try {
        list = parseInstanceFile(this.#path, text, this.#role)
      } catch (err) {
        // The last good list stays; each bad version is reported once, even when two versions
        // are wrong the same way (a write cut short twice).
        this.#lastBad = text
        return onError(new DiscoveryError((err as Error).message, { distinct: true }))
      }
      this.#last = text
      this.#lastBad = undefined
      onChange(list)
    }
    try {
      this.#watcher = watch(dirname(this.#path), { persistent: false }, () => {
        // A save is several events (create, write, rename): read once they have settled.
        clearTimeout(this.#timer)
        this.#timer = setTimeout(() => void read(), 50)
      })
      this.#watcher.on('error', (err) => onError(new DiscoveryError(`watching '${dirname(this.#path)}' failed: ${err.message}`)))
    } catch (err) {
      onError(new DiscoveryError(`cannot watch '${dirname(this.#path)}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`))
    }
    void read()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#timer)
    this.#watcher?.close()
  }
}

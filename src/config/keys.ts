// The keys a zod object schema accepts at a path of the configuration, so that an unknown key
// can be answered with the known one nearest to it. Walks through defaults, optionals,
// transforms (pipes), arrays and unions, which is all the configuration schema uses.
import type { z } from 'zod'

interface Def {
  type: string
  shape?: Record<string, z.ZodType>
  innerType?: z.ZodType
  in?: z.ZodType
  element?: z.ZodType
  options?: z.ZodType[]
}

const defOf = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def

export function knownKeysAt(schema: z.ZodType, path: readonly PropertyKey[]): string[] {
  const def = defOf(schema)
  switch (def.type) {
    case 'object': {
      if (path.length === 0) return Object.keys(def.shape ?? {})
      const next = def.shape?.[String(path[0])]
      return next === undefined ? [] : knownKeysAt(next, path.slice(1))
    }
    case 'default':
    case 'prefault':
    case 'optional':
    case 'nullable':
    case 'readonly':
      return def.innerType ? knownKeysAt(def.innerType, path) : []
    case 'pipe':
      return def.in ? knownKeysAt(def.in, path) : []
    case 'array':
      return def.element && typeof path[0] === 'number' ? knownKeysAt(def.element, path.slice(1)) : []
    case 'union':
      return [...new Set((def.options ?? []).flatMap((o) => knownKeysAt(o, path)))]
    default:
      return []
  }
}

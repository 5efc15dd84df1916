// A pod's role from its label, as llm-d names roles (its scheduler's by-label filters: the
// label `llm-d.ai/role`).
import type { Role } from '../../config/disaggregation.js'

/**
 * llm-d's values and what each plays here. An encode stage is not ours to route (an encode-only
 * pod takes no text request), so the stages beside it decide: `encode-prefill` prefills,
 * `encode-decode` decodes, `encode-prefill-decode` does both. `both` is llm-d's deprecated
 * name for `prefill-decode`.
 */
const LLMD_ROLES: Record<string, Role | 'encode'> = {
  prefill: 'prefill',
  decode: 'decode',
  'prefill-decode': 'both',
  both: 'both',
  encode: 'encode',
  'encode-prefill': 'prefill',
  'encode-decode': 'decode',
  'encode-prefill-decode': 'both',
}

/** The label values read, for messages. */
export const ROLE_LABEL_VALUES = Object.keys(LLMD_ROLES)

export type LabelRole = { role: Role } | { encodeOnly: true } | { unknown: string } | undefined

/** What a pod's labels say of its role: a role, an encode-only pod, a value not known, or nothing (no such label, or `roleLabel: false`). */
export function roleFromLabels(labels: Record<string, string> | undefined, roleLabel: string | false): LabelRole {
  if (roleLabel === false) return undefined
  const v = labels?.[roleLabel]
  if (v === undefined || v === '') return undefined
  const r = LLMD_ROLES[v]
  if (r === undefined) return { unknown: v }
  return r === 'encode' ? { encodeOnly: true } : { role: r }
}

/** A pod label value no role is known for: the instance takes the source's role, and this says so. */
export function unknownRoleNote(roleLabel: string, pods: readonly { pod: string; value: string }[], fallback: Role): string {
  const shown = pods.slice(0, 5).map((p) => `${p.pod}: '${p.value}'`)
  const more = pods.length > shown.length ? ` and ${pods.length - shown.length} more` : ''
  return `pods with a ${roleLabel} label of no known role (${shown.join(', ')}${more}) take the source's role, ${fallback}; the values read are ${ROLE_LABEL_VALUES.join(', ')}`
}

// The router groups an endpoint's instances list, and the group a pick is made in. A group is a
// filter the native pick applies (consistent hashing over the members listing it, counters kept
// per instance across groups): by model today, and in a disaggregated endpoint by the leg an
// instance plays as well, so that a prefill pick and a decode pick each choose among the
// instances doing that leg while one instance's load counts in both when it plays both.
import { plays, type Role } from '../config/disaggregation.js'

/** A leg of a disaggregated request: the instances computing the prompt, or generating. */
export type Leg = 'prefill' | 'decode'
export const LEGS: readonly Leg[] = ['prefill', 'decode']

/** Instances whose models are unknown are candidates for any model. */
export const ANY_MODEL = '\u0000any'

/** The group of a model (or ANY_MODEL) restricted to a leg; undefined leg: the model's own group. */
export function groupName(model: string, leg: Leg | undefined): string {
  return leg === undefined ? model : `${model}\u0000${leg}`
}

/** The group of every instance playing `leg`, whatever it serves (a request naming no model). */
export function legGroup(leg: Leg): string {
  return `\u0000role\u0000${leg}`
}

/**
 * The groups an instance lists: its models (ANY_MODEL when unknown) in an endpoint that does not
 * disaggregate; in one that does, each of them per leg it plays, and each leg's own group.
 */
export function groupsOf(models: readonly string[], role: Role, disaggregated: boolean): string[] {
  const names = models.length > 0 ? models : [ANY_MODEL]
  if (!disaggregated) return [...names]
  const out: string[] = []
  for (const leg of LEGS) {
    if (!plays(role, leg)) continue
    out.push(legGroup(leg))
    for (const m of names) out.push(groupName(m, leg))
  }
  return out
}

// `shareLoad` in the configuration (--share-load and its flags): where router replicas share
// their queued prefill, how often, and on which channel.
import { z } from 'zod'
import { redisUrlProblem } from './redis-url.js'

/** Bounds of the publication interval: below 1 ms a timer cannot keep up; above a second it is the heartbeat. */
export const SHARE_INTERVAL = { min: 1, max: 1000, default: 10 } as const
/** A replica heard from neither change nor heartbeat (1 s) for this long no longer counts. */
export const SHARE_EXPIRE = { min: 1500, max: 60_000, default: 3000 } as const
export const SHARE_PREFIX_DEFAULT = 'prefix-router'

const url = z.string().superRefine((s, ctx) => {
  const p = redisUrlProblem(s)
  if (p !== undefined) ctx.addIssue({ code: 'custom', message: `${p}; got ${JSON.stringify(s)}` })
})

export const ShareLoadSchema = z
  .object({
    /** redis://host:port[/db] or rediss:// (TLS): the Redis (or Valkey) the replicas publish through. */
    url,
    /** How often this replica reads its own queued prefill and, if it changed, publishes it. */
    intervalMs: z.number().int().min(SHARE_INTERVAL.min).max(SHARE_INTERVAL.max).default(SHARE_INTERVAL.default),
    /** Channel `<prefix>:load`: two fleets sharing one Redis give different prefixes. */
    prefix: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/, 'must be 1-128 letters, digits, . _ : or -, starting with a letter or digit')
      .default(SHARE_PREFIX_DEFAULT),
    /** A replica silent this long (3 missed heartbeats) is dropped: its figures stop counting. */
    expireMs: z.number().int().min(SHARE_EXPIRE.min).max(SHARE_EXPIRE.max).default(SHARE_EXPIRE.default),
  })
  .strict()

export type ShareLoadConfig = z.infer<typeof ShareLoadSchema>

/** A replica's id: printable ASCII without spaces, as it travels in every message and shows in /admin/replicas. */
export const replicaIdSchema = z.string().regex(/^[\x21-\x7e]{1,128}$/, 'must be 1-128 printable ASCII characters without spaces')

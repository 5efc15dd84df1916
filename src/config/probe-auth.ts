// The credentials the probes send (GET /health, /v1/models, /metrics) to instances behind an
// API key (vLLM's --api-key answers 401 on /v1/*): a bearer token read from a file or from
// an environment variable, never written into the configuration itself.
import { z } from 'zod'

export const ProbeAuthSchema = z
  .object({
    /** A file holding the token (a mounted Secret): read at start, and again after a 401 or 403. */
    tokenFile: z.string().min(1).optional(),
    /** The name of an environment variable holding the token. */
    tokenEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name').optional(),
  })
  .strict()
  .refine((a) => (a.tokenFile === undefined) !== (a.tokenEnv === undefined), { message: 'set one of tokenFile or tokenEnv' })

export type ProbeAuthConfig = z.infer<typeof ProbeAuthSchema>

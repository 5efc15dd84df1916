// Tenant isolation, as SageMaker does it: the X-Amzn-SageMaker-Prefix-Aware-Id header (or
// the body's prompt_cache_key) scopes the prefix key, so tenants never share a cache home
// by accident of sharing a system prompt. The rule a tenant id meets is here alone, for all
// three ways one arrives: the header, the body's prompt_cache_key, and pick()'s `tenant`.
import { InvalidArgTypeError, OutOfRangeError, RequestError } from '../errors.js'

export const TENANT_HEADER = 'x-amzn-sagemaker-prefix-aware-id'
// SageMaker's for its header: 1 to 64 printable ASCII characters.
const VALID = /^[\x20-\x7e]{1,64}$/
const RULE = '1 to 64 printable ASCII characters'

/** The tenant header's value as one string (a repeated header joined, as Node joins most). */
export const tenantHeaderValue = (header: string | string[] | undefined): string | undefined => (Array.isArray(header) ? header.join(',') : header)

export function tenantOf(header: string | string[] | undefined, promptCacheKey?: string): string | undefined {
  if (header !== undefined) {
    const v = tenantHeaderValue(header)!
    if (!VALID.test(v)) throw new RequestError('invalid_tenant', `${TENANT_HEADER} must be ${RULE}`)
    return v
  }
  if (promptCacheKey !== undefined) {
    if (!VALID.test(promptCacheKey)) throw new RequestError('invalid_prompt_cache_key', `'prompt_cache_key' must be ${RULE}`)
    return promptCacheKey
  }
  return undefined
}

/** pick()'s `tenant` argument, checked by the same rule (an argument error, not a request's). */
export function checkTenant(tenant: unknown): string {
  if (typeof tenant !== 'string') throw new InvalidArgTypeError('tenant', `a string of ${RULE}`, tenant)
  if (!VALID.test(tenant)) throw new OutOfRangeError('tenant', `${RULE} (0x20–0x7E)`, tenant)
  return tenant
}

// Tenant isolation, as SageMaker does it: the X-Amzn-SageMaker-Prefix-Aware-Id header (or
// the body's prompt_cache_key) scopes the prefix key, so tenants never share a cache home
// by accident of sharing a system prompt.
import { RequestError } from '../errors.js'

export const TENANT_HEADER = 'x-amzn-sagemaker-prefix-aware-id'
const VALID = /^[\x20-\x7e]{1,64}$/

/** The tenant header's value as one string (a repeated header joined, as Node joins most). */
export const tenantHeaderValue = (header: string | string[] | undefined): string | undefined => (Array.isArray(header) ? header.join(',') : header)

export function tenantOf(header: string | string[] | undefined, promptCacheKey?: string): string | undefined {
  if (header !== undefined) {
    const v = tenantHeaderValue(header)!
    if (!VALID.test(v)) throw new RequestError('invalid_tenant', `${TENANT_HEADER} must be 1 to 64 printable ASCII characters`)
    return v
  }
  if (promptCacheKey !== undefined) {
    if (!VALID.test(promptCacheKey)) throw new RequestError('invalid_prompt_cache_key', "'prompt_cache_key' must be 1 to 64 printable ASCII characters")
    return promptCacheKey
  }
  return undefined
}

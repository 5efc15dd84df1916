// The fronts' errors are one class, ProxyError, told apart by code: the codes a front makes
// are FrontCode, and a refusal made below the fronts is matched through isRefusal, whose
// RefusalCode the compiler holds each compared name to (tsc reads this file too).
import { describe, expect, it } from 'vitest'
import { noHealthyInstance, RequestError } from '../../src/core/errors.js'
import { isRefusal, notFound, ProxyError, toProxyError, type FrontCode, type RefusalCode } from '../../src/request/errors.js'

describe('the fronts’ error codes', () => {
  it('isRefusal matches the refusals made below the fronts by their code, and nothing else', () => {
    const none = noHealthyInstance('default', 1)
    expect(isRefusal(none, 'no_healthy_instance')).toBe(true)
    expect(isRefusal(toProxyError(none), 'no_healthy_instance', 'no_decode_instance')).toBe(true)
    expect(isRefusal(none, 'no_decode_instance')).toBe(false)
    expect(isRefusal(new RequestError('no_decode_instance', 'none plays decode', 503), 'no_healthy_instance', 'no_decode_instance')).toBe(true)
    expect(isRefusal(Object.assign(new Error('x'), { code: 'no_healthy_instance' }), 'no_healthy_instance')).toBe(false)
  })

  it('a code that is not one of them does not compile', () => {
    const e = notFound('endpoint_not_found', 'no endpoint')
    expect(e).toBeInstanceOf(ProxyError)
    // @ts-expect-error: a misspelt refusal code
    expect(isRefusal(e, 'no_healthy_instances')).toBe(false)
    // @ts-expect-error: a code no factory makes
    expect(() => notFound('no_such_code', 'x')).not.toThrow()
    const front: FrontCode = 'endpoint_not_found'
    const refusal: RefusalCode = 'no_prefill_instance'
    expect([front, refusal]).toEqual(['endpoint_not_found', 'no_prefill_instance'])
  })
})

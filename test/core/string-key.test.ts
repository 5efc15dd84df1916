// A string key is hashed as the UTF-8 of its first prefixLength code points (lone surrogates as
// U+FFFD, as Buffer.from writes them). The native side
// copies prefixLength + 1 UTF-16 units first and more only when surrogate pairs need them:
// these keys put pairs before, across and after that first copy's end.
import { afterEach, describe, expect, it } from 'vitest'
import { Router } from '../../src/core/router.js'
import { ids } from '../helpers/keys.js'

const PREFIX = 1024
const routers: Router[] = []
afterEach(() => routers.splice(0).forEach((r) => r.close()))

/** The first n code points of s (a lone surrogate counts as one, as in the router). */
const codePoints = (s: string, n: number) => [...s].slice(0, n).join('')

const rocket = '🚀' // one code point, two UTF-16 units, four UTF-8 bytes
/** Each variant's lead: a fixed length, so that the shapes below put their pairs where they say. */
const lead = (v: number) => `${String(v).padStart(3, '0')}:`
const L = lead(0).length
const shapes: Record<string, string> = {
  'pairs only': rocket.repeat(PREFIX + 10),
  'pairs after the first copy': 'x'.repeat(PREFIX - 3 - L) + rocket.repeat(20),
  'a pair as the last code point': 'x'.repeat(PREFIX - 1 - L) + rocket + 'tail',
  'a pair just past the key': 'x'.repeat(PREFIX - L) + rocket + 'tail',
  // Its high surrogate is the first copy's last unit (unit PREFIX), its low one beyond it.
  'a pair split by the first copy': rocket + 'x'.repeat(PREFIX - 2 - L) + rocket + 'tail',
  'a lone high surrogate at the end of the key': 'x'.repeat(PREFIX - 1 - L) + '\ud83d' + 'tail',
  'pairs scattered': Array.from({ length: 1500 }, (_, i) => (i % 7 === 0 ? rocket : 'é')).join(''),
  'shorter than the key': rocket.repeat(100) + 'x',
}

describe('string keys', () => {
  for (const [name, shape] of Object.entries(shapes)) {
    it(`route as the UTF-8 bytes of their first prefixLength code points: ${name}`, () => {
      const instances = ids(7).map((id) => ({ id }))
      const r = new Router({ instances, prefixLength: PREFIX })
      // Byte keys are cut at prefixLength bytes: this one's 4096 keep all of the reference's
      // (1024 code points are at most 4096 bytes), on the same ring.
      const ref = new Router({ instances, prefixLength: 4 * PREFIX })
      routers.push(r, ref)
      // Many variants of the shape, each with its own lead, so that agreeing by chance (1 in 7
      // instances each) cannot pass the test.
      for (let v = 0; v < 40; v++) {
        const s = lead(v) + shape
        const viaString = r.pick(s)
        const viaBytes = ref.pick(Buffer.from(codePoints(s, PREFIX), 'utf8'))
        expect(viaString.instance, `variant ${v}`).toBe(viaBytes.instance)
        viaString.release()
        viaBytes.release()
      }
    })
  }
})

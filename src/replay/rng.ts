// Seeded randomness for the workload generators: every draw comes from a named stream
// derived from (seed, name), so a run is reproducible from its seed and changing one knob
// (say, the question length) does not reshuffle unrelated draws (the arrival times).
import { xxh3 } from '../core/hash.js'

/** sfc32 (Chris Doty-Humphrey's Small Fast Counter): 128-bit state, passes PractRand to 2^40+. */
export class Rng {
  private a: number
  private b: number
  private c: number
  private d: number

  constructor(seed: number, stream = '') {
    // XXH3 spreads (seed, stream) over the 128-bit state; counter d starts at 1.
    const h1 = xxh3(`${stream}\0${seed}`)
    const h2 = xxh3(`${stream}\0${seed}`, h1)
    this.a = Number(h1 & 0xffffffffn) | 0
    this.b = Number(h1 >> 32n) | 0
    this.c = Number(h2 & 0xffffffffn) | 0
    this.d = 1
    for (let i = 0; i < 12; i++) this.u32()
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0
    this.d = (this.d + 1) | 0
    this.a = this.b ^ (this.b >>> 9)
    this.b = (this.c + (this.c << 3)) | 0
    this.c = (this.c << 21) | (this.c >>> 11)
    this.c = (this.c + t) | 0
    return t >>> 0
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.u32() / 4294967296
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n)
  }

  /** Uniform in [lo, hi). */
  uniform(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next()
  }

  /** Exponential with the given mean (Poisson inter-arrival times). */
  exponential(mean: number): number {
    return -mean * Math.log(1 - this.next())
  }

  /** Standard normal (Box–Muller; one of the pair is discarded for simplicity). */
  normal(): number {
    const u = 1 - this.next()
    const v = this.next()
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v)
  }

  /** Log-normal with the given median and sigma (of the underlying normal). */
  lognormal(median: number, sigma: number): number {
    return median * Math.exp(sigma * this.normal())
  }

  /** Geometric on 1, 2, 3, … with the given mean (≥ 1). */
  geometric(mean: number): number {
    if (mean <= 1) return 1
    const p = 1 / mean
    return 1 + Math.floor(Math.log(1 - this.next()) / Math.log(1 - p))
  }

  /** Fisher–Yates shuffle in place. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1)
      const t = items[i]!
      items[i] = items[j]!
      items[j] = t
    }
    return items
  }
}

/**
 * Zipf over ranks 0..n-1: P(rank k) ∝ 1 / (k + 1)^s. s = 0 is uniform; larger s
 * concentrates traffic on the first ranks. Sampling is a binary search of the CDF.
 */
export class Zipf {
  private readonly cdf: Float64Array

  constructor(
    readonly n: number,
    readonly s: number,
  ) {
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`Zipf n must be a positive integer; got ${n}`)
    this.cdf = new Float64Array(n)
    let sum = 0
    for (let k = 0; k < n; k++) {
      sum += 1 / Math.pow(k + 1, s)
      this.cdf[k] = sum
    }
    for (let k = 0; k < n; k++) this.cdf[k]! /= sum
  }

  /** Probability of rank k. */
  p(k: number): number {
    return this.cdf[k]! - (k === 0 ? 0 : this.cdf[k - 1]!)
  }

  sample(rng: Rng): number {
    const u = rng.next()
    const cdf = this.cdf
    let lo = 0
    let hi = cdf.length - 1
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (cdf[mid]! > u) hi = mid
      else lo = mid + 1
    }
    return lo
  }
}

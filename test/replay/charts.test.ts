// The replay's charts as rendered (vega's SVG): every lane of the largest run (13, every
// strategy with router replicas) in a colour of its own, far enough from every other to be
// told apart, and a replicas run saying so under each chart's title.
import { describe, expect, it } from 'vitest'
import { CHARTS, renderSvg } from '../../src/replay/charts.js'
import type { ReplayResult } from '../../src/replay/result.js'
import { strategyNames } from '../../src/replay/strategies.js'

/** A result with one lane per name: enough of each for every chart to draw it. */
function result(names: readonly string[], routerReplicas: number): ReplayResult {
  return {
    instances: 2,
    routerReplicas,
    strategies: names.map((strategy, k) => ({
      strategy,
      cdf: [
        [10 + k, 0.5],
        [20 + k, 1],
      ],
      instanceShares: { 'sim-0': 0.5, 'sim-1': 0.5 },
      timeline: [
        [0, (k % 10) / 10],
        [60, 0.5],
      ],
      events: [],
    })),
  } as unknown as ReplayResult
}

/** Lane name -> the colours its marks are drawn in (a line's stroke, a bar's fill). */
function laneColours(svg: string): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>()
  for (const m of svg.matchAll(/<path aria-label="[^"]*strategy: ([^"]+)"[^>]*?(?:stroke|fill)="(#[0-9a-f]{6})"/g)) {
    const set = out.get(m[1]!) ?? new Set<string>()
    set.add(m[2]!)
    out.set(m[1]!, set)
  }
  return out
}

/** sRGB hex to CIELAB (D65). */
function lab(hex: string): [number, number, number] {
  const lin = (i: number) => {
    const c = parseInt(hex.slice(i, i + 2), 16) / 255
    return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4
  }
  const [r, g, b] = [lin(1), lin(3), lin(5)]
  const f = (t: number) => (t > 216 / 24389 ? Math.cbrt(t) : ((24389 / 27) * t + 16) / 116)
  const x = f((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047)
  const y = f(0.2126 * r + 0.7152 * g + 0.0722 * b)
  const z = f((0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)
  return [116 * y - 16, 500 * (x - y), 200 * (y - z)]
}

/** CIE76 colour difference: above about 10, two colours are plainly different side by side. */
function deltaE(a: string, b: string): number {
  const [p, q] = [lab(a), lab(b)]
  return Math.hypot(p[0] - q[0], p[1] - q[1], p[2] - q[2])
}

describe('replay charts', () => {
  const names = strategyNames()

  it('the largest run has 13 lanes', () => {
    // The figure the palette is sized for: if lanes are added, the palette must keep up.
    expect(names).toHaveLength(13)
  })

  for (const [file, spec] of Object.entries(CHARTS)) {
    it(`${file}: each of the 13 lanes in its own colour, every pair at least 20 apart (CIELAB ΔE)`, async () => {
      const colours = laneColours(await renderSvg(spec(result(names, 3))))
      expect([...colours.keys()].sort()).toEqual([...names].sort())
      for (const [name, set] of colours) expect([...set], name).toHaveLength(1)
      const lanes = [...colours].map(([name, set]) => ({ name, colour: [...set][0]! }))
      const close: string[] = []
      for (let i = 0; i < lanes.length; i++) {
        for (let j = i + 1; j < lanes.length; j++) {
          const d = deltaE(lanes[i]!.colour, lanes[j]!.colour)
          if (d < 20) close.push(`${lanes[i]!.name} ${lanes[i]!.colour} and ${lanes[j]!.name} ${lanes[j]!.colour}: ${d.toFixed(1)}`)
        }
      }
      expect(close).toEqual([])
    })

    it(`${file}: a replicas run says so under the title; a one-router run does not`, async () => {
      const replicas = await renderSvg(spec(result(names, 4)))
      expect(replicas).toMatch(/<text[^>]*>4 router replicas per strategy[^<]*<\/text>/)
      const one = await renderSvg(spec(result(names.slice(0, 5), 1)))
      expect(one).not.toMatch(/router replicas/)
    })
  }
})

// The replay's charts, as Vega-Lite specs rendered to SVG in Node (vega's headless View;
// no browser, no canvas: text is measured by estimate). Kept small: ~100 points per line.
import type { TopLevelSpec } from 'vega-lite'
import { requireFeature } from '../core/optional-packages.js'
import type { ReplayResult } from './result.js'

const WIDTH = 560
const HEIGHT = 280
const SCHEMA = 'https://vega.github.io/schema/vega-lite/v6.json'
const LEGEND = { labelLimit: 240 }

/**
 * The lanes' colours: colorcet's glasbey_dark (Kovesi, CC BY 4.0; colorcet.holoviz.org),
 * made by Glasbey's method (Glasbey, van der Heijden, Toh and Gray, "Colour displays for
 * categorical images", Color Research & Application 32(4), 2007): each colour the most
 * distinct, in CIECAM02, from those before it, among colours dark enough for a white
 * background and not grey. Vega-Lite's default, tableau10, has 10: a run of 13 lanes (every
 * strategy, with router replicas) gave three pairs of lanes one colour. The first 13 here are
 * at least 23 apart in CIELAB (ΔE76); 16 leave room for a few more lanes.
 */
export const LANE_COLOURS: readonly string[] = ['#d70000', '#8c3cff', '#028800', '#00acc7', '#e7a500', '#ff7fd1', '#6c004f', '#583b00', '#005759', '#15e18d', '#0000dd', '#a2766a', '#bcb7ff', '#c004b9', '#645473', '#790000']

function order(r: ReplayResult): string[] {
  return r.strategies.map((s) => s.strategy)
}

/** One colour per lane, in the report's order (the legend's). */
function laneColour(r: ReplayResult) {
  return { field: 'strategy', type: 'nominal' as const, sort: order(r), legend: LEGEND, scale: { domain: order(r), range: [...LANE_COLOURS] } }
}

/**
 * The chart's title, and under it what a reader must know before comparing lanes: that each
 * lane was K router replicas (every replica its own state, requests dealt among them), not one.
 */
function title(r: ReplayResult, text: string) {
  if (r.routerReplicas <= 1) return text
  return { text, subtitle: `${r.routerReplicas} router replicas per strategy (requests dealt round-robin; each replica its own state)` }
}

/** TTFT CDF, one line per strategy, log-scaled time. */
export function ttftCdfSpec(r: ReplayResult): TopLevelSpec {
  const values = r.strategies.flatMap((s) => s.cdf.filter(([t]) => t > 0).map(([t, q]) => ({ strategy: s.strategy, ttft: Math.round(t * 10) / 10, q })))
  return {
    $schema: SCHEMA,
    title: title(r, 'Time to first token (CDF)'),
    width: WIDTH,
    height: HEIGHT,
    data: { values },
    mark: { type: 'line', interpolate: 'step-after' },
    encoding: {
      x: { field: 'ttft', type: 'quantitative', scale: { type: 'log' }, title: 'TTFT (ms, log scale)' },
      y: { field: 'q', type: 'quantitative', title: 'share of requests', axis: { format: '%' } },
      color: laneColour(r),
    },
  }
}

/** Share of requests per instance, grouped by strategy. */
export function sharesSpec(r: ReplayResult): TopLevelSpec {
  const values = r.strategies.flatMap((s) => Object.entries(s.instanceShares).map(([instance, share]) => ({ strategy: s.strategy, instance, share })))
  const even = 1 / r.instances
  return {
    $schema: SCHEMA,
    title: title(r, 'Share of requests per instance'),
    width: WIDTH,
    height: HEIGHT,
    layer: [
      {
        data: { values },
        mark: 'bar',
        encoding: {
          x: { field: 'instance', type: 'nominal', title: null, sort: null, axis: { labelAngle: 0 } },
          xOffset: { field: 'strategy', type: 'nominal', sort: order(r) },
          y: { field: 'share', type: 'quantitative', title: 'share of requests', axis: { format: '%' } },
          color: laneColour(r),
        },
      },
      {
        // The even share (1/N of the starting instances), for reading the bars against.
        data: { values: [{ even }] },
        mark: { type: 'rule', strokeDash: [4, 4], color: '#555' },
        encoding: { y: { field: 'even', type: 'quantitative' } },
      },
    ],
  }
}

/** Fleet hit rate over simulated time, one line per strategy; scale events as dashed rules. */
export function hitRateSpec(r: ReplayResult): TopLevelSpec {
  const values = r.strategies.flatMap((s) =>
    s.timeline.filter(([, h]) => Number.isFinite(h)).map(([t, hit]) => ({ strategy: s.strategy, minute: Math.round((t / 60) * 100) / 100, hit: Math.round(hit * 1000) / 1000 })),
  )
  const events = (r.strategies[0]?.events ?? []).map((e) => ({ minute: e.atMs / 60_000, label: `${e.kind} instance` }))
  return {
    $schema: SCHEMA,
    title: title(r, 'Fleet KV-cache hit rate over time'),
    width: WIDTH,
    height: HEIGHT,
    layer: [
      {
        data: { values },
        mark: 'line',
        encoding: {
          x: { field: 'minute', type: 'quantitative', title: 'simulated minutes' },
          y: { field: 'hit', type: 'quantitative', title: 'hit rate (prompt tokens)', axis: { format: '%' }, scale: { domain: [0, 1] } },
          color: laneColour(r),
        },
      },
      ...(events.length === 0
        ? []
        : [
            {
              data: { values: events },
              layer: [
                { mark: { type: 'rule' as const, strokeDash: [4, 4], color: '#555' }, encoding: { x: { field: 'minute', type: 'quantitative' as const } } },
                {
                  mark: { type: 'text' as const, align: 'left' as const, dx: 3, y: HEIGHT - 8, color: '#555' },
                  encoding: { x: { field: 'minute', type: 'quantitative' as const }, text: { field: 'label', type: 'nominal' as const } },
                },
              ],
            },
          ]),
    ],
  }
}

/** Renders a Vega-Lite spec to an SVG document. */
export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  requireFeature('charts')
  const [vega, vl] = await Promise.all([import('vega'), import('vega-lite')])
  const view = new vega.View(vega.parse(vl.compile(spec).spec), { renderer: 'none' })
  try {
    return await view.toSVG()
  } finally {
    view.finalize()
  }
}

export const CHARTS = {
  'ttft-cdf.svg': ttftCdfSpec,
  'instance-shares.svg': sharesSpec,
  'hit-rate.svg': hitRateSpec,
} as const

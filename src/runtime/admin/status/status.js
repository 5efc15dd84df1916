// The status page's script: polls GET /admin/status (every second; ?refresh=MS for another
// period, 250 at least) and redraws the page from it. Plain browser JavaScript, no framework.
// Every value goes in as text (textContent), never as markup: instance ids and model names
// come from discovery and from the instances themselves.
'use strict'

const REFRESH_MS = Math.max(250, Number(new URLSearchParams(location.search).get('refresh')) || 1000)

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag)
  for (const [k, v] of Object.entries(attrs ?? {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v))
  for (const c of children) if (c !== undefined && c !== null) e.append(c instanceof Node ? c : document.createTextNode(String(c)))
  return e
}

const pct = (x) => (x === null || x === undefined || Number.isNaN(x) ? '—' : `${(x * 100).toFixed(1)}%`)
const time = (iso) => new Date(iso).toLocaleTimeString(undefined, { hour12: false }) + `.${String(new Date(iso).getMilliseconds()).padStart(3, '0')}`

function duration(s) {
  if (s < 60) return `${s} s`
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`
}

/** up, down, ejected (outlier detection), as the row's data-health and its badge. */
function health(i) {
  if (i.ejectedUntil !== null) return 'ejected'
  return i.healthy ? 'up' : 'down'
}

/** A figure that is not read: off, or (for an instance out of rotation) not followed now. */
function unread(h, off) {
  return h === 'up' ? el('td', { class: 'muted' }, off) : el('td', { class: 'muted', title: 'not read while the instance is out of rotation' }, '—')
}

function engineCell(load, h) {
  if (load === null) return unread(h, 'off')
  if (load.fallback) return el('td', { class: 'warn', title: load.reason ?? '' }, `${load.state}${load.reason ? `: ${load.reason}` : ''}`)
  return el('td', {}, `running ${load.running ?? '—'} · waiting ${load.waiting ?? '—'} · KV ${pct(load.kvCacheUsage)}`)
}

function viewCell(kv, h) {
  if (kv === null) return unread(h, 'no events')
  const connected = kv.publishers.filter((p) => p.connected).length
  const cls = kv.view === 'fresh' ? 'ok' : 'warn'
  return el(
    'td',
    { class: cls, title: kv.staleReason ?? '' },
    `${kv.view} · ${kv.gpuBlocks} blocks${kv.offloadedBlocks ? ` (+${kv.offloadedBlocks} offloaded)` : ''} · ${connected}/${kv.publishers.length} publishers`,
    kv.staleReason ? el('div', { class: 'reason' }, kv.staleReason) : null,
  )
}

function instanceRow(i) {
  const h = health(i)
  const other = i.engineInFlight > 0 ? ` (+${i.engineInFlight} other clients)` : ''
  return el(
    'tr',
    { 'data-instance': i.id, 'data-health': h, class: h },
    el('td', { class: 'id' }, i.id, i.models.length ? el('div', { class: 'reason' }, i.models.join(', ')) : null),
    el('td', {}, i.role ?? 'both'),
    el('td', {}, el('span', { class: `badge ${h}` }, h.toUpperCase()), i.keptUntilReplacementHealthy ? el('div', { class: 'reason' }, 'kept until a replacement is healthy') : null),
    el('td', { class: 'num' }, `${i.inFlight}${other}`),
    el('td', { class: 'num' }, i.queuedPrefillBlocks ?? '—'),
    engineCell(i.engineLoad, h),
    viewCell(i.kvEvents, h),
    el('td', { class: 'num' }, pct(i.kvCacheHitRatio)),
    el('td', { class: 'num' }, `${i.requests} (${pct(i.share)})`),
    el('td', { class: 'num', title: i.ejectedUntil ? `out until ${i.ejectedUntil}` : '' }, i.ejections),
    el('td', { class: 'reason' }, i.lastError ?? ''),
  )
}

const INSTANCE_HEAD = ['Instance', 'Role', 'Health', 'In flight', 'Queued prefill (blocks)', 'Engine load', 'Exact view', 'Hit rate', 'Requests (share)', 'Ejections', 'Last error']

function endpointSection(ep) {
  const up = ep.instances.filter((i) => health(i) === 'up').length
  return el(
    'section',
    { class: 'endpoint', 'data-endpoint': ep.name },
    el('h2', {}, `Endpoint ${ep.name}`, el('span', { class: 'sub' }, ` ${ep.routing.strategy} · ${up} of ${ep.instances.length} instances up`)),
    el('table', {}, el('thead', {}, el('tr', {}, ...INSTANCE_HEAD.map((h) => el('th', {}, h)))), el('tbody', {}, ...ep.instances.map(instanceRow))),
  )
}

/** A peer's requests in flight, summed over its endpoints and instances. */
function peerInFlight(f) {
  if (f === null) return '—'
  let n = 0
  for (const ep of Object.values(f)) for (const v of Object.values(ep)) n += v
  return n
}

function sharingBody(s) {
  if (s.state === 'off') return [el('p', { class: 'muted', 'data-sharing': 'off' }, 'Not sharing queued prefill with other replicas (serve --share-load redis://HOST:PORT to share).')]
  const peers = s.peers.length
    ? el(
        'table',
        {},
        el('thead', {}, el('tr', {}, ...['Replica', 'Last heard', 'In flight', 'Sent at'].map((h) => el('th', {}, h)))),
        el('tbody', {}, ...s.peers.map((p) => el('tr', { 'data-peer': p.replica }, el('td', { class: 'id' }, p.replica), el('td', { class: 'num' }, `${p.ageMs} ms ago`), el('td', { class: 'num' }, peerInFlight(p.inFlight)), el('td', {}, time(p.sentAt))))),
      )
    : el('p', { class: 'muted' }, `No other replica heard within ${s.expireMs} ms.`)
  return [
    el(
      'p',
      { 'data-sharing': s.state },
      el('span', { class: `badge ${s.state === 'connected' ? 'up' : 'down'}` }, s.state.toUpperCase()),
      ` ${s.url} · channel ${s.channel} · every ${s.intervalMs} ms · sent ${s.messages.sent}, received ${s.messages.received}, dropped ${s.messages.dropped}` +
        (s.connectionFailures ? ` · ${s.connectionFailures} connection failures` : ''),
    ),
    peers,
  ]
}

function statusClass(status) {
  return status >= 500 ? 'bad' : status >= 400 ? 'warn' : 'ok'
}

function decisionsBody(d) {
  if (!d.recorded) return [el('p', { class: 'muted' }, 'This process routes no requests itself (the endpoint picker, or the primary of serve --workers N): no decisions are recorded here.')]
  if (d.recent.length === 0) return [el('p', { class: 'muted' }, 'No request routed yet.')]
  return [
    el('p', { class: 'muted' }, `${d.total} since start; the last ${Math.min(d.total, d.capacity)} shown, newest first.`),
    el(
      'table',
      {},
      el('thead', {}, el('tr', {}, ...['Time', 'Endpoint', 'Instance', 'Strategy', 'Decision', 'Status', 'ms', 'Retries'].map((h) => el('th', {}, h)))),
      el(
        'tbody',
        {},
        ...d.recent.map((r) =>
          el(
            'tr',
            { 'data-decision': r.decision ?? '' },
            el('td', {}, time(r.at)),
            el('td', {}, r.endpoint),
            el('td', { class: 'id' }, r.instance ?? '—'),
            el('td', {}, r.strategy),
            el('td', {}, r.decision ?? '—'),
            el('td', { class: `num ${statusClass(r.status)}` }, r.status),
            el('td', { class: 'num' }, r.ms),
            el('td', { class: 'num' }, r.retries),
          ),
        ),
      ),
    ),
  ]
}

function draw(s) {
  document.getElementById('replica').textContent = `replica ${s.replica} · v${s.version} · pid ${s.pid} · up ${duration(s.uptimeS)}`
  document.getElementById('endpoints').replaceChildren(...s.endpoints.map(endpointSection))
  document.getElementById('sharing-body').replaceChildren(...sharingBody(s.sharing))
  document.getElementById('decisions-body').replaceChildren(...decisionsBody(s.decisions))
  const state = document.getElementById('state')
  state.dataset.state = s.draining ? 'draining' : 'live'
  state.textContent = s.draining ? `DRAINING (/health answers 503) · ${time(s.now)}` : `live · ${time(s.now)}`
}

async function poll() {
  if (!document.hidden) {
    try {
      const r = await fetch('/admin/status', { cache: 'no-store' })
      if (!r.ok) throw new Error(`/admin/status answered ${r.status}`)
      draw(await r.json())
    } catch (err) {
      // The page stays as last drawn, marked as out of date, and keeps asking.
      const state = document.getElementById('state')
      state.dataset.state = 'unreachable'
      state.textContent = `not updating: ${err.message}`
    }
  }
  setTimeout(poll, REFRESH_MS)
}

poll()

// POST /admin/route?endpoint=NAME&api=chat|completions: a dry run of the exact view for one
// request body. It tokenizes the body as the router would before a pick and says, for every
// instance, how many of its leading blocks the instance reports holding (GPU, offloaded,
// pending) and whether its view is trusted. Nothing is routed, leased or recorded.
import type http from 'node:http'
import { readBody } from '../../request/read-body.js'
import type { AdminView } from './admin-view.js'

type Answer = { status: number; body: unknown }

const err = (status: number, message: string, code: string): Answer => ({ status, body: { error: { message, type: 'invalid_request_error', code } } })

async function* chunks(req: http.IncomingMessage): AsyncIterable<Buffer> {
  for await (const c of req) yield c as Buffer
}

export async function adminRoute(p: AdminView, req: http.IncomingMessage): Promise<Answer> {
  const q = new URL(req.url ?? '/', 'http://admin').searchParams
  const name = q.get('endpoint') ?? undefined
  const ep = p.endpoint(name)
  if (ep === undefined) return err(404, `no endpoint ${JSON.stringify((name ?? '').slice(0, 64))}`, 'endpoint_not_found')
  const api = q.get('api') ?? 'chat'
  if (api !== 'chat' && api !== 'completions') return err(400, `api must be chat or completions; got ${JSON.stringify(api.slice(0, 32))}`, 'invalid_api')
  if (ep.exact === undefined) return err(409, `endpoint '${ep.name}' has no exact view: configure kvEvents (--kv-events-port)`, 'no_exact_view')
  const tokenizer = p.keying.tokenizerFor(ep)
  if (tokenizer === undefined) return err(409, `endpoint '${ep.name}' has no tokenizer for the exact view: give --tokenizer (and strategy longest_prefix)`, 'no_tokenizer')
  let raw: Buffer
  try {
    raw = await readBody(chunks(req), p.config.limits.maxBodyBytes)
  } catch (e) {
    return err(413, (e as Error).message, 'body_too_large')
  }
  let model: string | undefined
  try {
    const b = JSON.parse(raw.toString('utf8')) as { model?: unknown }
    model = typeof b.model === 'string' ? b.model : undefined
  } catch {
    return err(400, 'the body is not JSON', 'invalid_json')
  }
  const t = await p.keying.dryRun(ep, tokenizer, api, raw, model)
  if (t === undefined) return err(422, `the body could not be tokenized (${tokenizer.mode} tokenizer): see prefix_router_tokenize_seconds{result="fallback"}`, 'not_tokenized')
  const blockSize = ep.router.params.exactBlockSize
  return {
    status: 200,
    body: {
      endpoint: ep.name,
      model: model ?? null,
      tokens: t.ids.length,
      blockSize,
      blocks: Math.floor(t.ids.length / blockSize),
      instances: ep.router.exact.match(t.ids, t.seed),
    },
  }
}

// A fast OpenAI-shaped upstream for bench/proxy.bench.ts: answers at once, no model behind
// it, so what the benchmark measures is the proxy. Streaming requests get 8 SSE chunks.
// --stamp: a JSON answer also says when the stub had the whole request ("received", process.hrtime
// in ns, one clock for every process on the machine), so that a client can split a proxy's
// latency into the request's way there and the answer's way back (bench:ladder).
// Usage: node bench/stub-upstream.mjs [--h2c] [--stamp]; prints "listening <port>".
import http from 'node:http'
import http2 from 'node:http2'

const answer = JSON.stringify({
  id: 'chatcmpl-stub',
  object: 'chat.completion',
  created: 0,
  model: 'stub',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
})
const chunk = (i) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: `t${i}` } }] })}\n\n`

const stamp = process.argv.includes('--stamp')

// --h2c: HTTP/2 with prior knowledge, the baseline for the benchmark's h2c rows.
const handler = (req, res) => {
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(req.url === '/v1/models' ? '{"object":"list","data":[{"id":"stub","object":"model"}]}' : '{}')
    return
  }
  let stream = false
  let size = 0
  req.on('data', (c) => {
    if (size === 0) stream = c.includes('"stream":true')
    size += c.length
  })
  req.on('end', () => {
    if (!stream) {
      const a = stamp ? `${answer.slice(0, -1)},"received":"${process.hrtime.bigint()}"}` : answer
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(a) })
      res.end(a)
      return
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    for (let i = 0; i < 8; i++) res.write(chunk(i))
    res.end('data: [DONE]\n\n')
  })
}
const server = process.argv.includes('--h2c') ? http2.createServer({ settings: { maxConcurrentStreams: 1000 } }, handler) : http.createServer({ keepAliveTimeout: 60_000 }, handler)
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`))
process.on('SIGTERM', () => process.exit(0))

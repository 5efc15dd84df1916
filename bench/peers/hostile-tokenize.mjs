// A vLLM pod for bench/hostile-peers.bench.ts whose POST /tokenize answers IDS ids (default
// 10M, "1,1,...": 20 MB) to any request, in chunks (no content-length, so the reader cannot
// refuse it before reading), and whose other routes answer as a healthy pod: /health, a
// chat completion.
// Usage: node bench/peers/hostile-tokenize.mjs [IDS]; prints "listening <port>".
import http from 'node:http'

const ids = Number(process.argv[2] ?? 10_000_000)
const answer = Buffer.from(`{"count":${ids},"max_model_len":8192,"tokens":[${'1,'.repeat(ids - 1)}1]}`)
const CHUNK = 256 * 1024
const chat = JSON.stringify({ id: 'c', object: 'chat.completion', created: 0, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } })
let tokenizeCalls = 0
let bytesSent = 0

const server = http.createServer((req, res) => {
  req.resume()
  req.on('end', () => {
    if (req.url === '/tokenize') {
      tokenizeCalls++
      res.writeHead(200, { 'content-type': 'application/json' })
      let at = 0
      const more = () => {
        while (at < answer.length && !res.destroyed) {
          const part = answer.subarray(at, at + CHUNK)
          at += part.length
          bytesSent += part.length
          if (!res.write(part)) return void res.once('drain', more)
        }
        if (!res.destroyed) res.end()
      }
      res.on('close', () => {})
      return more()
    }
    if (req.url === '/stats') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ tokenizeCalls, bytesSent, answerBytes: answer.length }))
    if (req.method === 'GET') return res.writeHead(req.url === '/health' ? 200 : 404).end()
    res.writeHead(200, { 'content-type': 'application/json' }).end(chat)
  })
})
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`))

// The hostile replica of bench/hostile-load.bench.ts: on the share-load channel of the Redis at
// argv[2], BURSTS bursts (one a second) of IDS messages, each under its own replica id and
// naming INSTANCES instances (the real one, argv[3], among them) with FIGURE blocks (default
// MAX_SAFE_INTEGER) queued on the real one. Prints the time each burst took to publish, then "done".
import { createClient } from '@redis/client'

const [url, real] = [process.argv[2]!, process.argv[3]!]
const IDS = Number(process.env.IDS ?? 1000)
const INSTANCES = Number(process.env.INSTANCES ?? 1001)
const BURSTS = Number(process.env.BURSTS ?? 5)
const FIGURE = Number(process.env.FIGURE ?? Number.MAX_SAFE_INTEGER)
const row: Record<string, number> = { [real]: FIGURE }
for (let i = 1; i < INSTANCES; i++) row[`http://made-up-${i}:8000`] = 1
const endpoints = JSON.stringify({ default: row })
const c = createClient({ url })
await c.connect()
for (let b = 0; b < BURSTS; b++) {
  const t0 = performance.now()
  await Promise.all(Array.from({ length: IDS }, (_, k) => c.publish('prefix-router:load', `{"replica":"hostile-${k}","seq":${b},"ts":${Date.now()},"endpoints":${endpoints}}`)))
  console.log(`burst ${b}: ${IDS} messages of ${endpoints.length + 60} bytes in ${(performance.now() - t0).toFixed(0)} ms`)
  await new Promise((r) => setTimeout(r, 1000))
}
await c.quit()
console.log('done')

// The program node:cluster runs in each worker (the primary sets it with setupPrimary).
import { outliveClosedPipes } from '../command-line/closed-pipes.js'
import { runWorker } from './worker.js'

// The primary's stdout and stderr are the worker's too.
outliveClosedPipes()
runWorker().catch((err: unknown) => {
  process.stderr.write(`prefix-router: worker ${process.pid}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`)
  process.exit(1)
})

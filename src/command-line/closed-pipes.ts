// A command that runs until it is stopped (serve, epp, sim) goes on when its stdout or stderr
// is a pipe nobody reads any more (`serve 2>&1 | head -3`, a log shipper that died). Node
// raises a write's EPIPE as an 'error' on process.stdout or process.stderr, which with no
// listener is an uncaught exception: the router ended at its next message, without a drain.
// What it writes there afterwards goes nowhere. The log lines on stdout have their own
// destination (log/batched-log.ts), which stops on its own EPIPE and says so.
export function outliveClosedPipes(): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE') throw err
    })
  }
}

// Child processes a test started, ended between tests: each still running gets the signal and
// is waited for, so no process (or the port it holds) outlives its test.
import type { ChildProcess } from 'node:child_process'

export async function endChildren(children: ChildProcess[], signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  for (const c of children.splice(0)) {
    if (c.exitCode !== null || c.signalCode !== null) continue
    const exited = new Promise((r) => c.once('exit', r))
    c.kill(signal)
    await exited
  }
}

import net from 'node:net'

/** A loopback port free a moment ago (bound, then released): for a child process to listen on. */
export async function freePort(): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const { port } = s.address() as net.AddressInfo
  await new Promise((r) => s.close(r))
  return port
}

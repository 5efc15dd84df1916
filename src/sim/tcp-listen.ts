// A plain TCP server listening on host:port (0: a free port), for the simulator's KV side
// channel and SGLang bootstrap servers: resolves once it listens, rejects with the bind error.
import net from 'node:net'

export async function listenTcp(host: string, port: number): Promise<{ server: net.Server; port: number }> {
  const server = net.createServer()
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  return { server, port: (server.address() as net.AddressInfo).port }
}

// HAProxy and nginx as reference proxies for bench/proxy.bench.ts: the same loopback hop made
// by event-driven C proxies, so the table shows what this machine allows for one extra hop.
// Both keep connections to the stub alive and stream answers unbuffered, as the router does.
// Optional: a peer whose binary is not installed is skipped with a note
// (apt-get install -y haproxy nginx-light).
import { spawn, type ChildProcess } from 'node:child_process'
import { accessSync, constants, mkdtempSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface Peer {
  name: string
  url: string
  child: ChildProcess
}

function which(bin: string): string | undefined {
  for (const dir of ['/usr/sbin', '/usr/local/sbin', ...(process.env.PATH ?? '').split(':')]) {
    const p = join(dir, bin)
    try {
      accessSync(p, constants.X_OK)
      return p
    } catch {
      // not in this directory
    }
  }
  return undefined
}

async function freePort(): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const port = (s.address() as net.AddressInfo).port
  await new Promise((r) => s.close(r))
  return port
}

async function waitForPort(port: number, child: ChildProcess, name: string): Promise<void> {
  const deadline = Date.now() + 5000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited with ${child.exitCode}`)
    const ok = await new Promise<boolean>((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => {
        c.destroy()
        resolve(true)
      })
      c.on('error', () => resolve(false))
    })
    if (ok) return
    if (Date.now() > deadline) throw new Error(`${name} did not listen on ${port}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

function haproxyConfig(port: number, upstream: URL): string {
  return `global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
frontend bench
  bind 127.0.0.1:${port}
  default_backend stub
backend stub
  http-reuse always
  server stub ${upstream.hostname}:${upstream.port}
`
}

function nginxConfig(port: number, upstream: URL, dir: string): string {
  const tmp = (n: string) => `${n}_temp_path ${join(dir, n)};`
  return `worker_processes 1;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')};
events { worker_connections 4096; }
http {
  access_log off;
  ${['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map(tmp).join('\n  ')}
  upstream stub { server ${upstream.hostname}:${upstream.port}; keepalive 128; }
  server {
    listen 127.0.0.1:${port};
    client_body_buffer_size 1m;
    location / {
      proxy_pass http://stub;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`
}

/** Starts the C proxies that are installed; returns them and a line per skipped one. */
export async function startCProxies(upstream: string): Promise<{ peers: Peer[]; skipped: string[] }> {
  const up = new URL(upstream)
  const dir = mkdtempSync(join(tmpdir(), 'prefix-router-peers-'))
  const peers: Peer[] = []
  const skipped: string[] = []
  const haproxy = which('haproxy')
  if (haproxy) {
    const port = await freePort()
    const cfg = join(dir, 'haproxy.cfg')
    writeFileSync(cfg, haproxyConfig(port, up))
    const child = spawn(haproxy, ['-db', '-f', cfg], { stdio: 'ignore' })
    await waitForPort(port, child, 'haproxy')
    peers.push({ name: 'haproxy', url: `http://127.0.0.1:${port}`, child })
  } else skipped.push('haproxy (not installed: apt-get install -y haproxy)')
  const nginx = which('nginx')
  if (nginx) {
    const port = await freePort()
    const cfg = join(dir, 'nginx.conf')
    writeFileSync(cfg, nginxConfig(port, up, dir))
    const child = spawn(nginx, ['-c', cfg, '-g', 'daemon off;'], { stdio: 'ignore' })
    await waitForPort(port, child, 'nginx')
    peers.push({ name: 'nginx', url: `http://127.0.0.1:${port}`, child })
  } else skipped.push('nginx (not installed: apt-get install -y nginx-light)')
  return { peers, skipped }
}

// The Redis address `--share-load` takes: redis://[user[:password]@]host[:port][/db], or
// rediss:// for TLS. Checked here, at start-up, so that a typo is an error naming the flag
// rather than a client retrying an address that can never work; and shown with its password
// hidden wherever it is logged or reported. The rules are the client's own (RedisClient.parseURL),
// restated so that checking a configuration does not load the client (some 120 ms of start-up).

/** What is wrong with `url` as a Redis address, or undefined when the client can use it. */
export function redisUrlProblem(url: string): string | undefined {
  let u: URL
  try {
    u = new URL(url)
  } catch {
    return 'must be redis://HOST:PORT[/DB] (rediss:// for TLS)'
  }
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') return 'must start with redis:// (or rediss:// for TLS)'
  if (u.hostname === '') return 'must name a host: redis://HOST:PORT[/DB]'
  if (u.search !== '' || u.hash !== '') return 'takes no query or fragment: redis://HOST:PORT[/DB]'
  if (u.pathname.length > 1 && !/^\/\d{1,5}$/.test(u.pathname)) return 'may end in /DB, a database number, and nothing else'
  try {
    decodeURIComponent(u.username)
    decodeURIComponent(u.password)
  } catch {
    return 'has a user name or password that is not valid percent-encoding'
  }
  return undefined
}

/** The address as it may be shown: any password replaced by `***`. */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url)
    if (u.password === '') return url
    u.password = '***'
    return u.toString()
  } catch {
    return url
  }
}

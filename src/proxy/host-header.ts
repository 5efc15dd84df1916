// RFC 9112 section 3.2: an HTTP/1.1 request with more than one Host line must get 400. Node
// keeps the first and drops the others silently, so the router and a proxy in front of it that
// reads the last one could disagree about which host a request is for. (One with none gets
// Node's own 400.)

/** Whether Node's raw header list (name, value, name, value...) names Host more than once. */
export function repeatsHost(rawHeaders: readonly string[]): boolean {
  let seen = false
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!
    if (name.length !== 4 || name.toLowerCase() !== 'host') continue
    if (seen) return true
    seen = true
  }
  return false
}

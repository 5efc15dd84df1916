// A SageMaker client signs each request with SigV4. The router does not check signatures
// (it must sit behind whatever authenticates its clients), and passes none on: a signature
// and a session token are credentials, which an instance has no use for and should never
// see. A bearer token (vLLM's --api-key) is not SigV4 and passes through.
const SIGV4 = /^AWS4-[A-Z0-9-]+ /

export function withoutAwsCredentials(h: Record<string, string | string[]>): Record<string, string | string[]> {
  const auth = h.authorization
  if (typeof auth === 'string' && SIGV4.test(auth)) delete h.authorization
  if (h['x-amz-security-token'] !== undefined) delete h['x-amz-security-token']
  return h
}

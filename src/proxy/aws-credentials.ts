// A SageMaker client signs each request with SigV4. The router does not check signatures
// (it must sit behind whatever authenticates its clients), and passes none on: a signature
// and a session token are credentials, which an instance has no use for and should never
// see. A bearer token (vLLM's --api-key) is not SigV4 and passes through.
const SIGV4 = /^AWS4-[A-Z0-9-]+ /

/** Whether a request header (name lowercase) is an AWS credential, never forwarded. */
export function isAwsCredential(name: string, value: string | string[]): boolean {
  if (name === 'x-amz-security-token') return true
  return name === 'authorization' && typeof value === 'string' && SIGV4.test(value)
}

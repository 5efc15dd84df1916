// The SageMaker runtime's request and answer headers that the router itself acts on. The
// others (Target-Model, Custom-Attributes, Inference-Id, …) are the container's business
// and pass through to the instance like any header.
import { badRequest } from '../request/errors.js'

/**
 * Names the inference component to invoke. The router has no components of its own; the
 * name is matched as a model of the endpoint (declared in an instance's `models`), so a
 * component is the group of the endpoint's instances that host it, as on SageMaker.
 */
export const INFERENCE_COMPONENT_HEADER = 'x-amzn-sagemaker-inference-component'

/** SageMaker's answer names the production variant; the router has one, under the default name. */
export const VARIANT_HEADER = 'x-amzn-invoked-production-variant'
export const VARIANT = 'AllTraffic'

// SageMaker's own rule for component names.
const COMPONENT_NAME = /^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$/

export function inferenceComponentOf(header: string | string[] | undefined): string | undefined {
  if (header === undefined) return undefined
  const v = Array.isArray(header) ? header.join(',') : header
  if (!COMPONENT_NAME.test(v)) {
    throw badRequest('invalid_inference_component', `${INFERENCE_COMPONENT_HEADER} must be 1 to 63 letters, digits and hyphens, starting and ending with a letter or digit`)
  }
  return v
}

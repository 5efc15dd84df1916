// The served model and its LoRA adapters, as vLLM's /v1/models lists them. A request for
// an adapter gets its own prefix-cache namespace (vLLM keys blocks by adapter too).
import { ApiError } from './openai-shapes.js'

export interface LoraSpec {
  name: string
  path: string
}

export interface ModelCard {
  id: string
  object: 'model'
  created: number
  owned_by: 'vllm'
  root: string
  parent: string | null
  max_model_len: number | null
  permission: object[]
}

export class ModelRegistry {
  private readonly loras = new Map<string, string>()
  private readonly created = Math.floor(Date.now() / 1000)

  constructor(
    readonly base: string,
    loras: readonly LoraSpec[],
    private readonly maxModelLen: number,
  ) {
    for (const l of loras) this.loras.set(l.name, l.path)
  }

  /** The name the cache is keyed by; 404 for a model that is not served. */
  resolve(model: string | undefined): string {
    if (model === undefined || model === this.base || this.loras.has(model)) return model ?? this.base
    throw new ApiError(404, `The model \`${model}\` does not exist.`, 'NotFoundError', 'model')
  }

  list(): { object: 'list'; data: ModelCard[] } {
    const card = (id: string, root: string, parent: string | null): ModelCard => ({
      id,
      object: 'model',
      created: this.created,
      owned_by: 'vllm',
      root,
      parent,
      max_model_len: parent === null ? this.maxModelLen : null,
      permission: [
        {
          id: `modelperm-${id}`,
          object: 'model_permission',
          created: this.created,
          allow_create_engine: false,
          allow_sampling: true,
          allow_logprobs: true,
          allow_search_indices: false,
          allow_view: true,
          allow_fine_tuning: false,
          organization: '*',
          group: null,
          is_blocking: false,
        },
      ],
    })
    return {
      object: 'list',
      data: [card(this.base, this.base, null), ...[...this.loras].map(([n, p]) => card(n, p, this.base))],
    }
  }

  load(body: unknown): string {
    const { lora_name: name, lora_path: path } = (body ?? {}) as { lora_name?: unknown; lora_path?: unknown }
    if (typeof name !== 'string' || name.length === 0 || typeof path !== 'string' || path.length === 0) {
      throw new ApiError(400, 'Both \'lora_name\' and \'lora_path\' must be provided.', 'InvalidUserInput', 'lora_name')
    }
    if (this.loras.has(name) || name === this.base) {
      throw new ApiError(400, `The lora adapter '${name}' has already been loaded.`, 'InvalidUserInput', 'lora_name')
    }
    this.loras.set(name, path)
    return `Success: LoRA adapter '${name}' added successfully.`
  }

  unload(body: unknown): string {
    const { lora_name: name } = (body ?? {}) as { lora_name?: unknown }
    if (typeof name !== 'string' || name.length === 0) {
      throw new ApiError(400, "'lora_name' needs to be provided to unload a LoRA adapter.", 'InvalidUserInput', 'lora_name')
    }
    if (!this.loras.delete(name)) {
      throw new ApiError(404, `The lora adapter '${name}' cannot be found.`, 'NotFoundError', 'lora_name')
    }
    return `Success: LoRA adapter '${name}' removed successfully.`
  }
}

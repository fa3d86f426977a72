// A velocity field with what it was trained on: which policy layers, which context mode, and how
// many optimisation steps it has had. Saved as flow_model.safetensors + flow_config.json.
import fs from 'node:fs';
import path from 'node:path';
import { InputError, loadParameters, saveParameters, type CausalLM } from '../../core-adapters/index.js';
import type { FlowRewardConfig } from './config.js';
import { CONTEXT_MODES, hookLayers, type ContextMode } from './latents.js';
import { VelocityField } from './velocity-field.js';

export const FLOW_WEIGHTS_FILE = 'flow_model.safetensors';
export const FLOW_CONFIG_FILE = 'flow_config.json';

export interface FlowModelConfig {
  latent_size: number;
  width: number;
  depth: number;
  rms_norm_eps: number;
  num_hidden_layers: number;
  hook_layers_percentile: number[];
  context_mode: ContextMode;
  /** Optimisation steps so far (pre-training and online); 0 means untrained. */
  trained_steps: number;
}

export class FlowModel {
  /** Distinct decoder layers read (0-based); duplicates from rounding are read once. */
  readonly layers: number[];

  constructor(
    readonly field: VelocityField,
    readonly config: FlowModelConfig,
  ) {
    this.layers = [...new Set(hookLayers(config.hook_layers_percentile, config.num_hidden_layers))];
  }

  /** Each read layer's id as the field sees it: hook / num_hidden_layers. */
  get layerIds(): number[] {
    return this.layers.map((l) => l / this.config.num_hidden_layers);
  }

  get trained(): boolean {
    return this.config.trained_steps > 0;
  }

  /** A fresh field (v = 0) for `lm`, shaped by reward.flow. */
  static create(lm: CausalLM, flow: FlowRewardConfig, seed: number): FlowModel {
    const config: FlowModelConfig = {
      latent_size: lm.config.hiddenSize,
      width: flow.width ?? lm.config.hiddenSize,
      depth: flow.depth,
      rms_norm_eps: lm.config.rmsNormEps,
      num_hidden_layers: lm.config.numLayers,
      hook_layers_percentile: [...flow.hook_layers_percentile],
      context_mode: flow.context_mode,
      trained_steps: 0,
    };
    return new FlowModel(FlowModel.fieldFor(config, seed), config);
  }

  private static fieldFor(config: FlowModelConfig, seed: number): VelocityField {
    return new VelocityField({ latentSize: config.latent_size, width: config.width, depth: config.depth, eps: config.rms_norm_eps, seed });
  }

  /** Loads a saved field and checks that it reads the same policy shape as `lm`. */
  static load(dir: string, lm: CausalLM): FlowModel {
    const file = path.join(dir, FLOW_CONFIG_FILE);
    if (!fs.existsSync(file)) throw new InputError(`${dir}: no ${FLOW_CONFIG_FILE}; not a flow model directory (make one with flowrl flow-pretrain)`);
    let config: FlowModelConfig;
    try {
      config = JSON.parse(fs.readFileSync(file, 'utf8')) as FlowModelConfig;
    } catch (e) {
      throw new InputError(`${file}: not valid JSON (${(e as Error).message})`);
    }
    for (const key of ['latent_size', 'width', 'depth', 'num_hidden_layers', 'trained_steps', 'rms_norm_eps'] as const) {
      if (typeof config[key] !== 'number') throw new InputError(`${file}: key '${key}' must be a number`);
    }
    if (!CONTEXT_MODES.includes(config.context_mode)) throw new InputError(`${file}: key 'context_mode' must be one of ${CONTEXT_MODES.join(', ')}`);
    const hooks = config.hook_layers_percentile as unknown;
    if (!Array.isArray(hooks) || !hooks.length || !hooks.every((p) => typeof p === 'number' && p > 0 && p <= 1)) {
      throw new InputError(`${file}: key 'hook_layers_percentile' must be a non-empty list of depth fractions in (0, 1]`);
    }
    if (config.latent_size !== lm.config.hiddenSize || config.num_hidden_layers !== lm.config.numLayers) {
      throw new InputError(
        `${file}: the field reads a policy with hidden size ${config.latent_size} and ${config.num_hidden_layers} layers; this policy has ${lm.config.hiddenSize} and ${lm.config.numLayers}`,
      );
    }
    const model = new FlowModel(FlowModel.fieldFor(config, 0), config);
    loadParameters(path.join(dir, FLOW_WEIGHTS_FILE), model.field.params);
    return model;
  }

  async save(dir: string): Promise<void> {
    fs.mkdirSync(dir, { recursive: true });
    await saveParameters(path.join(dir, FLOW_WEIGHTS_FILE), this.field.params);
    fs.writeFileSync(path.join(dir, FLOW_CONFIG_FILE), JSON.stringify(this.config, null, 2) + '\n');
  }

  /** Replaces weights and step count from a saved directory of the same shape. */
  restore(dir: string): void {
    const file = path.join(dir, FLOW_CONFIG_FILE);
    if (!fs.existsSync(file)) throw new InputError(`${dir}: no ${FLOW_CONFIG_FILE}; the checkpoint holds no flow model`);
    let saved: FlowModelConfig;
    try {
      saved = JSON.parse(fs.readFileSync(file, 'utf8')) as FlowModelConfig;
    } catch (e) {
      throw new InputError(`${file}: not valid JSON (${(e as Error).message})`);
    }
    if (!Number.isInteger(saved.trained_steps) || saved.trained_steps < 0) throw new InputError(`${file}: key 'trained_steps' must be a whole number >= 0`);
    loadParameters(path.join(dir, FLOW_WEIGHTS_FILE), this.field.params);
    this.config.trained_steps = saved.trained_steps;
  }

  dispose(): void {
    this.field.dispose();
  }
}

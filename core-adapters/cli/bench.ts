// flowrl bench: one training step (forward, backward, AdamW) and KV-cache sampling of a tiny Llama,
// timed on the chosen backend. The shapes match research/perf.md so numbers compare with PyTorch's.
import { initEngine, type BackendChoice } from '../engine/backend.js';
import { initWeights, modelFromWeights } from '../model/checkpoint.js';
import { parseModelConfig } from '../model/config.js';
import { generate } from '../model/generate.js';
import { packSequences } from '../model/logprobs.js';
import { AdamW } from '../model/optim.js';
import { languageModelStep } from '../model/train-step.js';
import { Rng } from '../random.js';
import { BACKEND_FLAG, numberFlag, parseFlags } from './args.js';

export const BENCH_MODEL = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  vocab_size: 64,
  hidden_size: 128,
  intermediate_size: 512,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 4,
  max_position_embeddings: 64,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  tie_word_embeddings: false,
};

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

export interface BenchResult {
  backend: string;
  train_step_ms: number;
  train_tokens_per_s: number;
  sample_tokens_per_s: number;
  peak_rss_mb: number;
}

export async function runBench(options: { backend: BackendChoice; steps: number; batch: number; quiet?: boolean }): Promise<BenchResult> {
  const info = await initEngine(options.backend, { quiet: options.quiet });
  const config = parseModelConfig(BENCH_MODEL, 'bench model');
  const model = modelFromWeights(config, initWeights(config, 0));
  const optimizer = new AdamW({ lr: 3e-4, weightDecay: 0.01 });
  const rng = new Rng(1);
  const T = BENCH_MODEL.max_position_embeddings;
  const rows = Array.from({ length: options.batch }, () => Array.from({ length: T }, () => rng.int(BENCH_MODEL.vocab_size)));
  const seq = packSequences(
    rows.map((r) => r.slice(0, 1)),
    rows.map((r) => r.slice(1)),
  );

  const trainTimes: number[] = [];
  for (let i = 0; i < options.steps + 2; i++) {
    const start = performance.now();
    languageModelStep(model, optimizer, seq);
    if (i >= 2) trainTimes.push(performance.now() - start);
  }
  const prompts = rows.map((r) => r.slice(0, 1));
  const newTokens = T - 1;
  const sampleTimes: number[] = [];
  for (let i = 0; i < options.steps + 1; i++) {
    const start = performance.now();
    generate(model, prompts, { maxNewTokens: newTokens, temperature: 1, seed: i });
    if (i >= 1) sampleTimes.push(performance.now() - start);
  }
  model.dispose();
  optimizer.dispose();
  const stepMs = median(trainTimes);
  return {
    backend: info.backend,
    train_step_ms: Math.round(stepMs * 10) / 10,
    train_tokens_per_s: Math.round((options.batch * T * 1000) / stepMs),
    sample_tokens_per_s: Math.round((options.batch * newTokens * 1000) / median(sampleTimes)),
    peak_rss_mb: Math.round(process.resourceUsage().maxRSS / 1024),
  };
}

export async function benchCommand(argv: string[]): Promise<void> {
  const { values } = parseFlags('bench', argv, { json: { type: 'boolean', default: false }, steps: { type: 'string' }, ...BACKEND_FLAG });
  const steps = numberFlag('bench', values, 'steps', 5, { integer: true, min: 1 });
  const json = values.json as boolean;
  const result = await runBench({ backend: values.backend as BackendChoice, steps, batch: 32, quiet: json });
  if (json) {
    console.log(JSON.stringify(result));
    return;
  }
  console.log(`tiny Llama (vocab 64, hidden 128, 4 heads, 2 layers, MLP 512), batch 32x64, backend ${result.backend}`);
  console.log(`  train step        ${result.train_step_ms.toFixed(1)} ms  (${result.train_tokens_per_s.toLocaleString('en-US')} tokens/s)`);
  console.log(`  KV-cache sampling ${result.sample_tokens_per_s.toLocaleString('en-US')} new tokens/s (32 prompts x 63 tokens)`);
  console.log(`  peak RSS          ${result.peak_rss_mb} MB`);
}

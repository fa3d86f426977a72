// flowrl demo: the foundation end to end in about a minute. A tiny Llama with its own tokenizer
// learns two-digit addition by supervised fine-tuning, samples before and after, and is saved as a
// Hugging Face directory that `flowrl generate` and `flowrl score` can read.
import path from 'node:path';
import type { BackendChoice } from '../config/choices.js';
import { initEngine } from '../engine/backend.js';
import { initModel, saveModel } from '../model/checkpoint.js';
import type { CausalLM } from '../model/causal-lm.js';
import { generate } from '../model/generate.js';
import { packSequences } from '../model/logprobs.js';
import { AdamW } from '../model/optim.js';
import { buildTokenizer, type TextTokenizer } from '../model/tokenizer.js';
import { languageModelStep } from '../model/train-step.js';
import { Rng } from '../random.js';
import { BACKEND_FLAG, numberFlag, parseFlags } from './args.js';

function problem(rng: Rng): { prompt: string; answer: string } {
  const a = rng.int(50);
  const b = rng.int(50);
  return { prompt: `${a}+${b}=`, answer: String(a + b) };
}

async function accuracy(model: CausalLM, tokenizer: TextTokenizer, problems: { prompt: string; answer: string }[]): Promise<number> {
  const eos = tokenizer.eosTokenId!;
  const { tokens } = await generate(
    model,
    problems.map((p) => tokenizer.encode(p.prompt)),
    { maxNewTokens: 4, greedy: true, stopTokenIds: [eos] },
  );
  const correct = tokens.filter((t, i) => tokenizer.decode(t.filter((id) => id !== eos)) === problems[i].answer).length;
  return correct / problems.length;
}

export async function demoCommand(argv: string[]): Promise<void> {
  const { values } = parseFlags('demo', argv, { steps: { type: 'string' }, out: { type: 'string' }, ...BACKEND_FLAG });
  const steps = numberFlag('demo', values, 'steps', 1500, { integer: true, min: 1 });
  const out = (values.out as string | undefined) ?? path.join('runs', 'demo-model');
  await initEngine(values.backend as BackendChoice);

  const tokenizer = buildTokenizer({ characters: '0123456789+=' });
  const model = initModel(
    {
      architectures: ['LlamaForCausalLM'],
      model_type: 'llama',
      vocab_size: tokenizer.vocabSize,
      hidden_size: 64,
      intermediate_size: 192,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      max_position_embeddings: 32,
      bos_token_id: tokenizer.tokenId(tokenizer.bosToken),
      eos_token_id: tokenizer.eosTokenId,
      pad_token_id: tokenizer.padTokenId,
    },
    0,
  );
  const rng = new Rng(0);
  const heldOut = Array.from({ length: 64 }, () => problem(rng));
  console.log(`two-digit addition with a ${model.trainableVariables().reduce((n, v) => n + v.size, 0).toLocaleString('en-US')}-parameter Llama`);
  console.log(`accuracy before training: ${(100 * (await accuracy(model, tokenizer, heldOut))).toFixed(1)}%`);

  const optimizer = new AdamW({ lr: 3e-3, weightDecay: 0.01 });
  const eos = tokenizer.eosTokenId!;
  const started = Date.now();
  for (let step = 1; step <= steps; step++) {
    const batch = Array.from({ length: 32 }, () => problem(rng));
    const seq = packSequences(
      batch.map((p) => tokenizer.encode(p.prompt)),
      batch.map((p) => [...tokenizer.encode(p.answer), eos]),
      tokenizer.padTokenId,
    );
    const loss = await languageModelStep(model, optimizer, seq);
    if (step % 25 === 0 || step === steps) {
      const filled = Math.round((20 * step) / steps);
      process.stdout.write(`\r[${'#'.repeat(filled)}${'.'.repeat(20 - filled)}] step ${step}/${steps} loss ${loss.toFixed(3)}`);
    }
  }
  process.stdout.write(`  (${((Date.now() - started) / 1000).toFixed(1)} s)\n`);
  console.log(`accuracy after training:  ${(100 * (await accuracy(model, tokenizer, heldOut))).toFixed(1)}%`);
  const samples = await generate(model, heldOut.slice(0, 4).map((p) => tokenizer.encode(p.prompt)), { maxNewTokens: 4, greedy: true, stopTokenIds: [eos] });
  heldOut.slice(0, 4).forEach((p, i) => console.log(`  ${p.prompt}${tokenizer.decode(samples.tokens[i], true)}  (expected ${p.answer})`));

  await saveModel(model, out, { tokenizer });
  console.log(`saved a Hugging Face checkpoint to ${out}; try: npx flowrl generate --model ${out} --prompt "12+30=" --greedy`);
  optimizer.dispose();
  model.dispose();
}

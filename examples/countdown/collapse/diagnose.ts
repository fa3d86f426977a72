// Why does FlowRL collapse? Numbers from finished runs of the collapse experiment (their final
// val_prompts.jsonl records, and for FlowRL runs with ProjZ their final checkpoint):
//   - the length tilt: the recipe's 1/|y| makes the fixed point pi_ref(y) exp(|y| c) among answers of
//     equal reward. Per prompt, the c that brings the reference closest to the policy (least
//     KL(pi|S || tilted pi_ref|S)), and how much of the KL that tilt explains;
//   - on-policy sampling: the reference's correct mass on answers the policy has dropped (share below
//     0.1 % where the reference gives at least 1 %);
//   - log Z: ProjZ's output per prompt against the true log-partition of the trajectory-balance target
//     with raw rewards and summed log-probs, log(e^beta pi_ref(S) + 1 - pi_ref(S)) (S: the listed
//     correct set; only meaningful for flowrl.reward_source score with length_normalize false).
//   npx tsx examples/countdown/collapse/diagnose.ts RUN_DIR...
import fs from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { createHost, readValPrompts, scoreResponses, TOKENS, type Config, type Dataset, type PromptMatchingRecord, type Worker } from '../../../core-adapters/index.js';
import { PROJ_Z, poolPromptStates, type ProjZ } from '../../../plugin/index.js';

const DROPPED = 1e-3;
const PLAUSIBLE = 1e-2;

/** KL(p || q) of two distributions given as arrays. */
function kl(p: number[], q: number[]): number {
  return p.reduce((total, x, i) => (x > 0 ? total + x * Math.log(x / Math.max(q[i], 1e-300)) : total), 0);
}

/** The reference tilted by exp(length * c), renormalised (shares stored as 0 count as 1e-7). */
function tilt(ref: number[], lengths: number[], c: number): number[] {
  const w = ref.map((q, i) => Math.max(q, 1e-7) * Math.exp(lengths[i] * c));
  const z = w.reduce((a, b) => a + b, 0);
  return w.map((x) => x / z);
}

/** The c in [-5, 5] that minimises KL(policy || tilted reference), by golden-section search (the KL is convex in c). */
function bestTilt(m: PromptMatchingRecord, lengths: number[]): { c: number; kl: number } {
  let [lo, hi] = [-5, 5];
  const f = (c: number) => kl(m.shares, tilt(m.ref_shares, lengths, c));
  const g = (Math.sqrt(5) - 1) / 2;
  for (let i = 0; i < 100; i++) {
    const a = hi - g * (hi - lo);
    const b = lo + g * (hi - lo);
    if (f(a) < f(b)) hi = b;
    else lo = a;
  }
  const c = (lo + hi) / 2;
  return { c, kl: f(c) };
}

function mean(values: number[]): number {
  return values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
}

/** ProjZ's log Z for each validation prompt, from the run's final checkpoint (eval mode: no dropout). */
async function projZOutputs(runDir: string): Promise<{ logZ: number[]; beta: number } | undefined> {
  const root = path.join(runDir, 'checkpoints');
  const steps = fs.existsSync(root) ? fs.readdirSync(root).flatMap((d) => /^global_step_(\d+)$/.exec(d)?.[1] ?? []).map(Number) : [];
  if (!steps.length) return undefined;
  const checkpoint = path.join(root, `global_step_${Math.max(...steps)}`);
  const host = await createHost(path.join(checkpoint, 'config.yaml'), { overrides: ['trainer.resume_mode=disable', 'engine.workers=1'], quiet: true });
  const config = host.container.get<Config>(TOKENS.Config);
  const flowrl = config.flowrl as { log_z: string; reward_source: string; length_normalize: boolean } | undefined;
  // The true log-partition below is that of raw rewards with summed log-probs.
  if (config.algorithm.name !== 'flowrl' || flowrl?.log_z !== 'proj_z' || flowrl.reward_source !== 'score' || flowrl.length_normalize) return undefined;
  const dataset = host.container.get<Dataset>(TOKENS.Dataset);
  await dataset.init();
  const prompts = dataset.val.map((p) => p.ids);
  const worker = host.container.get<Worker>(TOKENS.Worker);
  await worker.init();
  worker.loadCheckpoint(checkpoint);
  const head = worker.module.heads.get(PROJ_Z) as ProjZ;
  const logZ = prompts.map((ids) =>
    tf.tidy(() => {
      // The prompt and one response token: pooling reads the prompt's states only.
      const seq = { batch: 1, promptLength: ids.length, responseLength: 1, inputIds: Int32Array.from([...ids, 0]), attentionMask: new Int32Array(ids.length + 1).fill(1) };
      const out = scoreResponses(worker.module.lm, seq);
      return head.forward(poolPromptStates(out.hidden, seq.attentionMask, 1, seq.promptLength), { training: false }).dataSync()[0];
    }),
  );
  const beta = (config.flowrl as { beta: number }).beta;
  worker.dispose();
  return { logZ, beta };
}

const runs = process.argv.slice(2);
if (!runs.length) {
  console.error('usage: npx tsx examples/countdown/collapse/diagnose.ts RUN_DIR...');
  process.exit(2);
}
console.log('run'.padEnd(28), 'KL to ref', 'KL to best tilt', 'median c', 'dropped ref mass', 'log Z error (mean |.|)');
for (const dir of runs) {
  const records = readValPrompts(dir, 'final');
  if (!records?.size) {
    console.log(`${dir}: no val_prompts.jsonl`);
    continue;
  }
  const fits: { kl: number; tilted: number; c: number; dropped: number }[] = [];
  for (const record of records.values()) {
    const m = record.matching;
    if (!m?.answers) continue;
    // The countdown tokenizer has one token per character, plus eos.
    const lengths = m.answers.map((a) => a.length + 1);
    const best = bestTilt(m, lengths);
    const dropped = m.ref_shares.reduce((total, q, i) => (q >= PLAUSIBLE && m.shares[i] < DROPPED ? total + q : total), 0);
    fits.push({ kl: m.kl, tilted: best.kl, c: best.c, dropped });
  }
  if (!fits.length) {
    console.log(`${dir}: no matching records with answers (trainer.val_matching)`);
    continue;
  }
  const cs = fits.map((f) => f.c).sort((a, b) => a - b);
  let logZError = '-';
  const z = await projZOutputs(dir);
  if (z) {
    const errors = [...records.values()].map((r) => {
      const refMass = r.matching!.ref_mass;
      const trueLogZ = Math.log(Math.exp(z.beta) * refMass + 1 - refMass);
      return Math.abs(z.logZ[r.prompt] - trueLogZ);
    });
    logZError = mean(errors).toFixed(2);
  }
  console.log(
    path.basename(dir).padEnd(28),
    mean(fits.map((f) => f.kl)).toFixed(3).padStart(9),
    mean(fits.map((f) => f.tilted)).toFixed(3).padStart(15),
    cs[Math.floor(cs.length / 2)].toFixed(2).padStart(8),
    mean(fits.map((f) => f.dropped)).toFixed(3).padStart(16),
    logZError.padStart(22),
  );
}

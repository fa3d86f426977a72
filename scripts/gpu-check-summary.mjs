// The GPU check's figures side by side, as Markdown: node scripts/gpu-check-summary.mjs OUT_DIR
// (scripts/gpu-check.sh writes OUT_DIR/*.json and calls this). A missing file is a missing row.
import fs from 'node:fs';
import path from 'node:path';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node scripts/gpu-check-summary.mjs OUT_DIR');
  process.exit(2);
}
const read = (name) => {
  const file = path.join(dir, `${name}.json`);
  if (!fs.existsSync(file)) return undefined;
  const lines = fs.readFileSync(file, 'utf8').trim().split('\n');
  try {
    return JSON.parse(lines.at(-1));
  } catch {
    return undefined;
  }
};
// The 0.5B-shape RL step on this project's 2-core CPU machine (docs/performance.md, 2026-11-25).
const CPU_RL_STEP_S = 161.3;
const fmt = (x, digits = 1) => (x === undefined || x === null || Number.isNaN(x) ? '—' : Number(x).toFixed(digits));
const ratio = (a, b) => (a && b ? (a / b).toFixed(2) : '—');

const limits = read('limits');
const [tiny, torchTiny] = [read('tiny'), read('torch_tiny')];
const [model, torchModel] = [read('model'), read('torch_model')];
const [rl, torchRl] = [read('rl_step'), read('torch_rl_step')];
const rows = [['job', 'flowrl (webgpu)', 'PyTorch (CUDA)', 'flowrl / PyTorch']];
rows.push(['tiny train step, ms', fmt(tiny?.train_step_ms), fmt(torchTiny?.train_step_ms), ratio(tiny?.train_step_ms, torchTiny?.train_step_ms)]);
rows.push(['tiny sampling, tokens/s', fmt(tiny?.sample_tokens_per_s, 0), fmt(torchTiny?.sample_tokens_per_s, 0), ratio(tiny?.sample_tokens_per_s, torchTiny?.sample_tokens_per_s)]);
rows.push([`${model?.model ?? 'model'} train step, ms`, fmt(model?.train_step_ms), fmt(torchModel?.train_step_ms), ratio(model?.train_step_ms, torchModel?.train_step_ms)]);
rows.push([`${model?.model ?? 'model'} sampling, tokens/s`, fmt(model?.sample_tokens_per_s, 0), fmt(torchModel?.sample_tokens_per_s, 0), ratio(model?.sample_tokens_per_s, torchModel?.sample_tokens_per_s)]);
const unfused = read('model_unfused');
// flowrl's decode step with its fused programs and on tfjs's own ops (FLOWRL_WEBGPU_FUSED=off).
rows.push([`${model?.model ?? 'model'} decode step, ms`, fmt(model?.decode_step_ms), '—', '—']);
rows.push([`${model?.model ?? 'model'} decode step on tfjs's own ops, ms`, fmt(unfused?.decode_step_ms), '—', '—']);
const torchPhases = torchRl?.phases ?? {};
for (const phase of rl?.phases ?? []) {
  rows.push([`RL step: ${phase.name}, s`, fmt(phase.seconds, 2), fmt(torchPhases[phase.name], 2), ratio(phase.seconds, torchPhases[phase.name])]);
}
rows.push(['RL step: whole, s', fmt(rl?.step_seconds, 2), fmt(torchRl?.step_seconds, 2), ratio(rl?.step_seconds, torchRl?.step_seconds)]);

const out = [`# GPU check (${new Date().toISOString().slice(0, 10)})`, ''];
if (limits) {
  const peak = Math.max(...Object.values(limits.matmul_gflop_s));
  out.push(`GPU: ${limits.adapter.description}; float32 matmul ${Object.entries(limits.matmul_gflop_s).map(([n, g]) => `${n}^3 ${fmt(g, 0)} GFLOP/s`).join(', ')} (peak ${fmt(peak / 1000, 2)} TFLOP/s through tfjs's kernels); copy ${fmt(limits.copy_gb_s)} GB/s.`, '');
}
out.push(...rows.map((r, i) => `| ${r.join(' | ')} |${i === 0 ? `\n|${r.map(() => '---').join('|')}|` : ''}`));
if (rl?.step_seconds && rl.model === 'qwen2.5-0.5b-config.json') out.push('', `The RL step against 2 CPU cores (${CPU_RL_STEP_S} s): ${(CPU_RL_STEP_S / rl.step_seconds).toFixed(1)}x faster (goal: 20x).`);
console.log(out.join('\n'));

// The webgpu engine path (tfjs's WebGPU backend on Dawn) against the wasm path, on a software Vulkan
// driver (lavapipe, unpacked by scripts/lavapipe.mjs from test-prerequisites). Everything runs in
// child processes: the driver is found through environment variables set before Dawn loads.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { gpuProbeSkipReason, probeGpuInChild } from '../core-adapters/engine/webgpu.js';
import { readTensors } from '../core-adapters/model/safetensors.js';
import { lavapipeEnv } from '../scripts/lavapipe.mjs';
import type { BackendResult } from './webgpu-equivalence.js';
import { BUILT_CLI, readRunMetrics, ROOT, runBuiltFlowrl, runNode, tempDir, withoutTiming, writeCountdownConfig } from './helpers.js';
import { call, type SglangItem } from './serve-helpers.js';


function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).to.equal(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

const PARAMETER_TOLERANCE = 5e-4;

const maxAbs = (values: ArrayLike<number>) => Array.from(values).reduce((m, v) => Math.max(m, Math.abs(v)), 0);

describe('the webgpu engine path (Dawn on a software Vulkan driver) against wasm', function () {
  this.timeout(600_000);
  const lavapipe = lavapipeEnv();
  // One lavapipe thread: mocha runs two files at once on the cores it has (37 s alone against 43 s).
  // 128-bit vectors (LP_NATIVE_VECTOR_WIDTH, read by gallivm's lp_bld_init.c; in Mesa 25.0.7's
  // lavapipe): LLVM compiles tfjs's shaders in about half the time. On a fresh machine, whose Mesa
  // shader cache is empty, this file took 118 s against 155 s (79 s against 73 s with it filled).
  const gpuEnv = 'env' in lavapipe ? { ...lavapipe.env, LP_NUM_THREADS: '1', LP_NATIVE_VECTOR_WIDTH: '128' } : {};

  before(function () {
    if ('skipped' in lavapipe) {
      console.log(`      (skipped: ${lavapipe.skipped})`);
      this.skip();
    }
  });

  it('log-probs within 1e-5, the same seeded and greedy samples (top-p on the host, temperature and greedy drawn by the GPU), three training steps, addN of 18 tensors, split-K products and the token-choosing losses as wasm; no tensor leaks; the same with the vocabulary held in blocks under a lowered binding limit', async () => {
    const run = await runNode(['--import', 'tsx', path.join('test', 'webgpu-equivalence.ts')], 300_000, gpuEnv);
    expect(run.status, run.stderr).to.equal(0);
    const { wasm, webgpu, webgpuSplit } = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as Record<'wasm' | 'webgpu' | 'webgpuSplit', BackendResult>;
    expect(wasm.engine.backend).to.equal('wasm');
    expect(webgpu.engine.backend).to.equal('webgpu');
    expect(webgpu.engine.gpu?.software, webgpu.engine.gpu?.description).to.equal(true);
    expect(maxAbsDiff(webgpu.logProbs, wasm.logProbs), 'log-probs').to.be.at.most(1e-5);
    expect(maxAbsDiff(webgpu.entropy, wasm.entropy), 'entropies').to.be.at.most(1e-4);
    expect(webgpu.sampled, 'seeded samples').to.deep.equal(wasm.sampled);
    expect(maxAbsDiff(webgpu.sampledLogProbs.flat(), wasm.sampledLogProbs.flat()), 'sampled log-probs').to.be.at.most(1e-5);
    // AdamW at lr 1e-2 amplifies float differences where a gradient is near zero (its step is
    // m/sqrt(v)): after three steps the wasm path with and without the native addon differ by
    // 2.1e-4 in one of these parameters (5e-5 elsewhere), so webgpu is held to 5e-4 on every path.
    webgpu.losses.forEach((loss, i) => expect(loss, `loss ${i}`).to.be.closeTo(wasm.losses[i], 1e-4 * Math.abs(wasm.losses[i])));
    expect(maxAbsDiff(webgpu.params, wasm.params), 'parameters after three steps').to.be.at.most(PARAMETER_TOLERANCE);
    expect(webgpu.addN).to.deep.equal(Array(5).fill(171));
    expect(webgpu.norm).to.be.closeTo(wasm.norm, 1e-4);
    // Sums of up to 5,000 float32 terms in another order: up to 2.8e-6 of the largest value against the
    // stock wasm kernels (FLOWRL_NATIVE=off), 5.4e-7 against the native addon's (the inputs are seeded).
    webgpu.products.forEach((p, i) => expect(maxAbsDiff(p, wasm.products[i]), `product ${i}`).to.be.at.most(4e-6 * Math.max(1, maxAbs(wasm.products[i]))));
    for (const [name, { grad, metrics }] of Object.entries(wasm.valueChoosingLosses)) {
      expect(maxAbsDiff(webgpu.valueChoosingLosses[name].grad, grad), `${name} gradient`).to.be.at.most(1e-6);
      for (const [key, value] of Object.entries(metrics)) expect(webgpu.valueChoosingLosses[name].metrics[key], `${name} ${key}`).to.be.closeTo(value, 1e-6);
    }
    expect(webgpu.tensorsLeaked, 'tensors left after the work').to.equal(0);

    // The embedding (and tied head) as three blocks: the same numbers, a joined checkpoint.
    const split = webgpuSplit.split!;
    expect(split.params).to.include.members(['model.embed_tokens.weight#0', 'model.embed_tokens.weight#2']).and.not.include('model.embed_tokens.weight');
    expect(split.optimizerState).to.include.members(['m/model.embed_tokens.weight', 'v/model.embed_tokens.weight']);
    expect(split.optimizerState.filter((name) => name.includes('#'))).to.deep.equal([]);
    expect(split.restored, 'optimizer state saved joined and restored into blocks').to.equal(true);
    expect(maxAbsDiff(webgpuSplit.logProbs, wasm.logProbs), 'split: log-probs').to.be.at.most(1e-5);
    expect(maxAbsDiff(webgpuSplit.entropy, wasm.entropy), 'split: entropies').to.be.at.most(1e-4);
    expect(webgpuSplit.sampled, 'split: seeded samples').to.deep.equal(wasm.sampled);
    webgpuSplit.losses.forEach((loss, i) => expect(loss, `split: loss ${i}`).to.be.closeTo(wasm.losses[i], 1e-4 * Math.abs(wasm.losses[i])));
    expect(maxAbsDiff(webgpuSplit.params, wasm.params), 'split: parameters after three steps').to.be.at.most(PARAMETER_TOLERANCE);
    expect(webgpuSplit.tensorsLeaked, 'split: tensors left after the work').to.equal(0);
  });

  it("fused programs (RMSNorm, SwiGLU and its gradient, a decode step's attention and KV-cache writes, sampling) against float64, LoRA merged for forwards without a tape, and a decode step's GPU programs and readback", async () => {
    const run = await runNode(['--import', 'tsx', path.join('test', 'webgpu-kernels-check.ts')], 300_000, gpuEnv);
    expect(run.status, run.stderr).to.equal(0);
    const r = JSON.parse(run.stdout.trim().split('\n').at(-1)!);
    // float32 against float64, relative to the largest value: measured 2e-8 to 7e-7.
    for (const [name, error] of Object.entries({ rmsNorm: r.rmsNorm, rmsNormManyRows: r.rmsNormManyRows, ...r.swiGlu, timeSlice: r.timeSlice })) expect(error, name).to.be.at.most(2e-6);
    r.attention.forEach((a: { out: number; cache: number }, i: number) => {
      expect(a.out, `attention case ${i}`).to.be.at.most(2e-6);
      expect(a.cache, `cache written, case ${i}`).to.be.at.most(2e-6);
    });
    // The GPU's draws are sampleToken's for the same uniforms, with their log-probabilities.
    expect(r.sampling.draws).to.equal(144);
    expect(r.sampling.mismatches).to.deep.equal([]);
    expect(r.sampling.logProbError).to.be.at.most(1e-5);
    expect([r.sampling.greedyTie, r.sampling.ended, r.sampling.nanRow], 'first of tied maxima, an ended row, a NaN row').to.deep.equal([10, -1, -2]);
    // AdamW in place: three programs a variable (tfjs's ops took 14), torch's update in float64.
    for (const name of ['param', 'm', 'v']) expect(r.adamW[name], `AdamW ${name}`).to.be.at.most(2e-6);
    expect(r.adamW.programsPerVariable).to.equal(3);
    expect(r.adamW.tensorsLeft, 'tensors left by three AdamW steps').to.equal(0);
    // Prefill and decode shapes, then after an adapter update, a base weight assigned and the
    // adapters written in place by AdamW.
    expect(r.model.mergedErrors, 'merged LoRA weights against x W + (x A) B').to.have.length(5);
    r.model.mergedErrors.forEach((error: number, i: number) => expect(error, `merged weights, case ${i}`).to.be.at.most(2e-6));
    expect(r.model.tensorsAfterUpdate, 'merged weights replaced after an adapter update').to.equal(0);
    // Attention a query row at a time (long sequences) against whole: logits and every gradient.
    expect(r.model.chunkedErrors.length).to.be.above(2);
    r.model.chunkedErrors.forEach((error: number, i: number) => expect(error, `chunked attention, output ${i}`).to.be.at.most(1e-5));
    // One decode step: per layer 2 RMSNorms, 5 products (the residuals added in two of them), 2
    // cache writes, the attention and SwiGLU (tfjs's ops took 62 with LoRA); 2 floats a row read back.
    const programs = r.model.programs as Record<string, number>;
    const total = Object.values(programs).reduce((a, b) => a + b, 0);
    expect(total, JSON.stringify(programs)).to.be.at.most(11 * r.model.layers + 6);
    for (const name of ['SoftmaxProgram', 'ConcatProgram', 'TransposeProgram', 'TransposeSharedProgram', 'BinaryOpProgram']) expect(programs[name], name).to.equal(undefined);
    expect(r.model.readBytes).to.equal(2 * 2 * 4);
  });

  /** A tiny run (2 prompts x 4 samples, 2 steps, no validation) on `backend`; returns its directory. */
  async function tinyRun(dir: string, backend: 'webgpu' | 'wasm', extra: Record<string, unknown>, env: Record<string, string> = {}) {
    const config = writeCountdownConfig(dir, {
      data: { train_batch_size: 2 },
      actor_rollout_ref: { rollout: { n: 4 }, actor: { ppo_mini_batch_size: 2 } },
      trainer: { total_training_steps: 2, val_before_train: false, test_freq: -1 },
      engine: { backend },
      ...extra,
    });
    return { run: await runBuiltFlowrl(['train', config], 300_000, { ...gpuEnv, ...env }), runDir: path.join(dir, 'run') };
  }

  const flowrl = { plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'flowrl' } };
  // Each run covers several paths, to keep the suite short: lavapipe is slow.
  const cases: [string, Record<string, unknown>, string[]][] = [
    ['FlowRL (ProjZ head, full weights)', flowrl, ['actor']],
    // clip_cov chooses tokens by the current log-probs: on webgpu from a forward pass read first.
    // (kl_cov's top-k by covariance is not compared by run: tfjs's split-K products add in any
    // order, so tied log-probs of identical answers can differ in the last bit and change the
    // order; given the same values it is compared in webgpu-equivalence.ts.)
    [
      "GRPO with LoRA adapters, the clip_cov loss and RLFR's flow rewards (the field trained online)",
      {
        plugins: [path.join(ROOT, 'plugin.json')],
        algorithm: { name: 'grpo' },
        actor_rollout_ref: {
          rollout: { n: 4 },
          actor: { ppo_mini_batch_size: 2, policy_loss: { loss_mode: 'clip_cov', clip_cov_ratio: 0.2 } },
          model: { path: path.join(ROOT, 'examples', 'countdown', 'base-model'), lora_rank: 4, lora_alpha: 8 },
        },
        reward: { flow: { enable: true, flow_model: path.join(ROOT, 'examples', 'countdown', 'flow-model') } },
      },
      ['actor', 'flow'],
    ],
    ['PPO with a critic', { algorithm: { name: 'ppo' } }, ['actor', 'critic']],
  ];
  for (const [name, extra, roles] of cases) {
    it(`${name}: flowrl train on webgpu logs the metrics and saves the weights that wasm does`, async () => {
      const [gpu, cpu] = [await tinyRun(tempDir(), 'webgpu', extra), await tinyRun(tempDir(), 'wasm', extra)];
      expect(gpu.run.status, gpu.run.stderr).to.equal(0);
      expect(cpu.run.status, cpu.run.stderr).to.equal(0);
      expect(gpu.run.stderr).to.match(/tfjs backend: webgpu/);
      const [a, b] = [readRunMetrics(gpu.runDir), readRunMetrics(cpu.runDir)];
      expect(a.map((m) => m.step)).to.deep.equal([1, 2]);
      a.forEach((metrics, i) => {
        const expected = withoutTiming(b[i]);
        expect(Object.keys(withoutTiming(metrics)).sort()).to.deep.equal(Object.keys(expected).sort());
        for (const [key, value] of Object.entries(expected)) expect(metrics[key], `step ${i + 1} ${key}`).to.be.closeTo(value, 1e-4 * Math.max(1, Math.abs(value)));
      });
      // The checkpoint's weights (read back from the GPU asynchronously), and the optimizer state.
      for (const role of roles) {
        const checkpoint = (runDir: string) => path.join(runDir, 'checkpoints', 'global_step_2', role);
        const files = fs.readdirSync(checkpoint(cpu.runDir)).filter((f) => f.endsWith('.safetensors'));
        expect(files, role).to.include('optimizer.safetensors');
        for (const file of files) {
          const [x, y] = [readTensors(path.join(checkpoint(gpu.runDir), file)), readTensors(path.join(checkpoint(cpu.runDir), file))];
          expect([...x.keys()].sort(), `${role}/${file}`).to.deep.equal([...y.keys()].sort());
          for (const [tensor, t] of y) expect(maxAbsDiff(x.get(tensor)!.data, t.data), `${role}/${file} ${tensor}`).to.be.at.most(1e-4 * Math.max(1, maxAbs(t.data)));
        }
      }
    });
  }

  it('a Dawn error stops the run with a message naming the operation and the GPU programs, exit 1, no checkpoint', async () => {
    const dir = tempDir();
    // The first softmax also issues an invalid buffer request: Dawn rejects it, as it would a bad dispatch.
    const { run, runDir } = await tinyRun(dir, 'webgpu', flowrl, { FLOWRL_WEBGPU_INJECT_ERROR: 'SoftmaxProgram' });
    expect(run.status, run.stderr).to.equal(1);
    const message = run.stderr.split('\n').find((l) => l.startsWith('flowrl train: webgpu:'));
    expect(message, run.stderr).to.not.equal(undefined);
    expect(message).to.match(/ValidationError: .*MapRead/);
    expect(message).to.match(/\(during sampling \(the drawn tokens\); GPU programs since the last readback: .*SoftmaxProgram/);
    expect(run.stderr).to.not.match(/internal error|\n\s+at /);
    expect(fs.existsSync(path.join(runDir, 'checkpoints'))).to.equal(false);
  });

  it('flowrl serve on webgpu answers as on wasm: the same greedy and seeded tokens, log-probs within 1e-4', async () => {
    const body = (sampling: Record<string, unknown>) => ({ input_ids: [1, 5, 9, 6], return_logprob: true, sampling_params: { max_new_tokens: 12, ignore_eos: true, ...sampling } });
    const answers: Record<string, SglangItem[]> = {};
    for (const backend of ['webgpu', 'wasm']) {
      const child = spawn(process.execPath, [BUILT_CLI, 'serve', '--model', path.join(ROOT, 'examples', 'countdown', 'base-model'), '--port', '0', '--backend', backend], { cwd: ROOT, env: { ...process.env, ...(backend === 'webgpu' ? gpuEnv : {}) } });
      let stderr = '';
      child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
      const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
      try {
        const [listening, url] = await new Promise<string[]>((resolve, reject) => {
          let out = '';
          child.stdout.setEncoding('utf8').on('data', (d: string) => {
            out += d;
            const m = /.*listening on (http:\/\/\S+).*/.exec(out);
            if (m) resolve([m[0], m[1]]);
          });
          void exited.then((code) => reject(new Error(`flowrl serve --backend ${backend} exited ${code}: ${stderr.slice(0, 400)}`)));
        });
        expect(listening).to.include(backend === 'webgpu' ? 'tfjs backend webgpu on llvmpipe' : 'tfjs backend wasm;');
        answers[backend] = [];
        for (const sampling of [{ temperature: 0 }, { temperature: 0.9, top_p: 0.95, sampling_seed: 7 }]) {
          const answer = await call(url, '/generate', body(sampling));
          expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
          answers[backend].push(answer.body as SglangItem);
        }
      } finally {
        child.kill('SIGTERM');
      }
      expect(await exited, stderr).to.equal(0);
    }
    for (const [i, gpu] of answers.webgpu.entries()) {
      const cpu = answers.wasm[i];
      expect(gpu.output_ids, `request ${i}`).to.deep.equal(cpu.output_ids);
      const logprobs = (item: SglangItem) => item.meta_info.output_token_logprobs.map(([logprob]) => logprob);
      expect(maxAbsDiff(logprobs(gpu), logprobs(cpu)), `request ${i}`).to.be.at.most(1e-4);
    }
  });

  it('flowrl bench --limits --backend webgpu measures matmul GFLOP/s and copy bandwidth on the adapter', async () => {
    const run = await runBuiltFlowrl(['bench', '--limits', '--backend', 'webgpu', '--matrix', '128', '--limits-mb', '4', '--rounds', '1', '--json'], 120_000, gpuEnv);
    expect(run.status, run.stderr).to.equal(0);
    const limits = JSON.parse(run.stdout) as { adapter: { software: boolean }; matmul_gflop_s: Record<string, number>; copy_gb_s: number; copy_mb: number };
    expect(limits.adapter.software).to.equal(true);
    expect(Object.keys(limits.matmul_gflop_s)).to.deep.equal(['128']);
    expect(limits.matmul_gflop_s['128']).to.be.greaterThan(0);
    expect(limits.copy_gb_s).to.be.greaterThan(0);
    expect(limits.copy_mb).to.equal(4);
  });

  it('a weight past the binding limit that is not a vocabulary matrix is refused at load, naming it and the limit (exit 2)', async () => {
    // The tiny bench model's fused q|k|v projection [128, 384] (192 KiB) past a limit lowered to
    // 150 kB; its [64, 128] embedding is within it.
    const run = await runBuiltFlowrl(['bench', '--backend', 'webgpu', '--steps', '1'], 120_000, { ...gpuEnv, FLOWRL_WEBGPU_BINDING_LIMIT: '150000' });
    expect(run.status, run.stderr).to.equal(2);
    expect(run.stderr).to.include('model.layers.0.self_attn.qkv_proj.weight: [128,384] float32 takes 0.19 MiB, more than this GPU binds at once (0.14 MiB); webgpu splits only the vocabulary matrices');
  });

  it("the GPU check's one-file bundle (scripts/gpu-bundle.mjs) holds all of tfjs (the union package that registers the gradients too) and measures on webgpu", async () => {
    // As in .gpu/ on the GPU machine: Dawn's package beside the bundle and nothing else to resolve.
    // (A train step here would take 26 s of lavapipe; a missing package fails at load.)
    const dir = tempDir('flowrl-gpu-bundle-');
    fs.mkdirSync(path.join(dir, 'node_modules'));
    fs.symlinkSync(path.join(ROOT, 'node_modules', 'webgpu'), path.join(dir, 'node_modules', 'webgpu'));
    const built = await runNode([path.join('scripts', 'gpu-bundle.mjs'), '--bundle-only', dir], 120_000);
    expect(built.status, built.stderr).to.equal(0);
    const run = await runNode([path.join(dir, 'flowrl.bundle.mjs'), 'bench', '--limits', '--backend', 'webgpu', '--matrix', '128', '--limits-mb', '4', '--rounds', '1', '--json'], 120_000, gpuEnv);
    expect(run.status, run.stderr).to.equal(0);
    expect((JSON.parse(run.stdout) as { matmul_gflop_s: Record<string, number> }).matmul_gflop_s['128']).to.be.greaterThan(0);
  });

  it('auto passes the software adapter by, saying why; FLOWRL_BACKEND=webgpu takes it', async () => {
    const script = "import { initEngine } from './core-adapters/engine/backend.ts'; const e = await initEngine('auto'); console.log(e.backend);";
    const auto = await runNode(['--import', 'tsx', '--input-type=module', '-e', script], 120_000, gpuEnv);
    expect(auto.status, auto.stderr).to.equal(0);
    expect(auto.stdout.trim()).to.equal('wasm');
    expect(auto.stderr).to.match(/webgpu not chosen: the adapter is a software one \(llvmpipe/);
    const forced = await runNode(['--import', 'tsx', '--input-type=module', '-e', script], 120_000, { ...gpuEnv, FLOWRL_BACKEND: 'webgpu' });
    expect(forced.status, forced.stderr).to.equal(0);
    expect(forced.stdout.trim()).to.equal('webgpu');
    expect(forced.stderr).to.match(/\[flowrl\] GPU: llvmpipe.*\(software\); storage binding 128 MiB/);
  });
});

describe("auto's GPU probe", () => {
  it('is skipped on Linux without a GPU device node or a Vulkan driver named in the environment, and only then', () => {
    const dev = tempDir('flowrl-dev-');
    const reason = gpuProbeSkipReason({}, 'linux', dev);
    expect(reason).to.equal(`no GPU device node (${dev}/dri/renderD*, ${dev}/nvidia*, ${dev}/dxg) and no Vulkan driver named in VK_DRIVER_FILES/VK_ADD_DRIVER_FILES/VK_ICD_FILENAMES`);
    fs.mkdirSync(path.join(dev, 'dri'));
    fs.writeFileSync(path.join(dev, 'dri', 'card0'), '');
    fs.writeFileSync(path.join(dev, 'nvidia-uvm'), '');
    expect(gpuProbeSkipReason({}, 'linux', dev), 'a display node and nvidia-uvm alone reach no Vulkan driver').to.equal(reason);
    for (const name of ['VK_DRIVER_FILES', 'VK_ADD_DRIVER_FILES', 'VK_ICD_FILENAMES']) expect(gpuProbeSkipReason({ [name]: '/x/icd.json' }, 'linux', dev), name).to.equal(undefined);
    expect(gpuProbeSkipReason({}, 'darwin', dev)).to.equal(undefined);
    expect(gpuProbeSkipReason({}, 'win32', dev)).to.equal(undefined);
    for (const node of ['dri/renderD128', 'nvidiactl', 'nvidia0', 'dxg']) {
      fs.writeFileSync(path.join(dev, node), '');
      expect(gpuProbeSkipReason({}, 'linux', dev), node).to.equal(undefined);
      fs.rmSync(path.join(dev, node));
    }
  });

  it('on this machine, when it has no GPU device node, gives that reason instead of what a child found', function () {
    const reason = gpuProbeSkipReason();
    if (!reason) this.skip();
    expect(probeGpuInChild()).to.deep.equal({ unavailable: reason });
  });
});

// Backend choice for tfjs. The node bindings are optional peers: they cannot be installed everywhere
// (their install downloads libtensorflow), so they are imported by name at run time.
import './tfjs-union.js';
import * as tf from '@tensorflow/tfjs-core';
import { createRequire } from 'node:module';
import path from 'node:path';
import { InputError } from '../errors.js';
import { registerFusedKernels } from './fused.js';
import { launchedRank } from './mpi.js';
import { installWasmKernelOverrides } from './kernels.js';
import { blasDisabledByEnv, loadNativeKernels } from './native.js';
import { describeAdapter, openGpu, probeGpuInChild, registerWebgpuBackend, type GpuAdapterReport } from './webgpu.js';
import { BACKEND_CHOICES, NATIVE_CHOICES, type BackendChoice, type NativeChoice } from '../config/choices.js';


/** FLOWRL_NATIVE=off (or 0) wins over any setting; FLOWRL_BLAS=none turns auto into loop. */
function resolveNativeChoice(setting: NativeChoice): NativeChoice {
  const env = process.env.FLOWRL_NATIVE;
  if (env === 'off' || env === '0') return 'off';
  return setting === 'auto' && blasDisabledByEnv() ? 'loop' : setting;
}

/** The native choice when none is given: auto, as the environment variables adjust it. */
export function defaultNativeChoice(): NativeChoice {
  return resolveNativeChoice('auto');
}

/** The tfjs backend in use and its accelerations. */
export interface EngineInfo {
  /** The tfjs backend name now active: tensorflow, webgpu, wasm or cpu. */
  backend: string;
  /** The GPU adapter, when webgpu is active or was considered. */
  gpu?: GpuAdapterReport;
  /** Why `auto` did not choose webgpu (no package, no adapter, a software adapter). */
  gpuNotChosen?: string;
  /** Where the tensorflow backend came from (tfjs-node-gpu or tfjs-node), when it is used. */
  binding?: string;
  simd?: boolean;
  /** Kernel accelerations in effect (wasm only), e.g. the native BLAS. */
  accelerations: string[];
  /** Why the native addon is not in use, when engine.native is auto and it failed to load. */
  nativeUnavailable?: string;
  /** The native addon runs its compiled loop because no optimised BLAS was found (not by choice). */
  blasMissing?: boolean;
}

const NODE_BINDINGS = ['@tensorflow/tfjs-node-gpu', '@tensorflow/tfjs-node'];

/**
 * Printed at start when the addon found no optimised BLAS. The factor is `flowrl bench` on 2 cores
 * (tiny Llama, batch 32): a train step takes 265 ms on the compiled loop and 132 ms with OpenBLAS.
 */
export const NO_BLAS_HINT =
  'no optimised BLAS found: training runs about 2x slower than with OpenBLAS. Install it: sudo apt-get install libopenblas0-pthread (Debian/Ubuntu), brew install openblas (macOS); FLOWRL_BLAS=none hides this line';

let active: EngineInfo | undefined;
let activeNative: NativeChoice | undefined;

/** Installs the wasm kernel overrides, with the native addon unless `native` is off. */
function accelerate(info: EngineInfo, native: NativeChoice): void {
  const loaded = native === 'off' ? {} : loadNativeKernels();
  const kernels = native === 'loop' ? loaded.loopOnly : loaded.kernels;
  registerFusedKernels();
  info.accelerations = [...installWasmKernelOverrides(kernels), 'fused RMSNorm for sampling'];
  info.nativeUnavailable = loaded.error;
  info.blasMissing = native === 'auto' && kernels !== undefined && !kernels.blas;
  activeNative = native;
}
let announced = false;

/** What the engine prints once at start: the backend and its accelerations, and what is missing. */
export function engineBanner(info: EngineInfo): string[] {
  const detail = info.binding ? ` (${info.binding})` : info.simd ? ' (SIMD)' : '';
  const extra = info.accelerations.length ? `; ${info.accelerations.join('; ')}` : '';
  const missing = info.nativeUnavailable ? `; native kernels unavailable (${info.nativeUnavailable})` : '';
  const lines = [`[flowrl] tfjs backend: ${info.backend}${detail}${extra}${missing}`];
  if (info.backend === 'webgpu' && info.gpu) lines.push(`[flowrl] GPU: ${describeAdapter(info.gpu)}`);
  else if (info.gpuNotChosen) lines.push(`[flowrl] webgpu not chosen: ${info.gpuNotChosen}`);
  if (info.blasMissing) lines.push(`[flowrl] ${NO_BLAS_HINT}`);
  return lines;
}

/** Installs again the kernels of the active engine path (after something replaced them). */
export function reinstallEngineKernels(): void {
  if (active?.backend === 'wasm' && activeNative) accelerate(active, activeNative);
}

async function tryNodeBinding(): Promise<string | undefined> {
  for (const name of NODE_BINDINGS) {
    try {
      await import(name);
      if (tf.findBackend('tensorflow')) return name;
    } catch {
      // not installed, or libtensorflow missing: try the next one
    }
  }
  return undefined;
}

async function tryWasm(): Promise<boolean> {
  // Required, not imported, for the reason in tfjs-union.ts; loading it registers the backend.
  const require = createRequire(import.meta.url);
  const { setWasmPaths } = require('@tensorflow/tfjs-backend-wasm') as typeof import('@tensorflow/tfjs-backend-wasm');
  setWasmPaths(path.dirname(require.resolve('@tensorflow/tfjs-backend-wasm')) + path.sep);
  try {
    return await tf.setBackend('wasm');
  } catch {
    return false;
  }
}

/**
 * webgpu when asked for, or for `auto` on a hardware adapter; otherwise undefined with the reason
 * (a software adapter such as lavapipe is correct but slower than the CPU path, so auto passes it by).
 */
async function tryWebgpu(choice: BackendChoice): Promise<{ info?: EngineInfo; gpu?: GpuAdapterReport; reason: string }> {
  if (choice === 'auto') {
    const seen = probeGpuInChild();
    if ('unavailable' in seen) return { reason: seen.unavailable };
    if (seen.software) return { gpu: seen, reason: `the adapter is a software one (${seen.description}); engine.backend=webgpu uses it anyway` };
  }
  const probe = await openGpu();
  if ('unavailable' in probe) {
    if (choice === 'webgpu') throw new InputError(`engine.backend is 'webgpu' but ${probe.unavailable} (install the optional dependency webgpu, or use auto)`);
    return { reason: probe.unavailable };
  }
  await registerWebgpuBackend(probe.adapter);
  if (!(await tf.setBackend('webgpu'))) {
    if (choice === 'webgpu') throw new InputError(`engine.backend is 'webgpu' but the webgpu backend failed to initialise on ${probe.report.description} (use auto or wasm)`);
    return { gpu: probe.report, reason: `the webgpu backend failed to initialise on ${probe.report.description}` };
  }
  return { info: { backend: 'webgpu', gpu: probe.report, accelerations: [] }, reason: '' };
}

/** FLOWRL_BACKEND, when set, replaces the configured backend choice. */
export function backendChoiceFromEnv(choice: BackendChoice): BackendChoice {
  const env = process.env.FLOWRL_BACKEND;
  if (!env) return choice;
  if (!BACKEND_CHOICES.includes(env as BackendChoice)) throw new InputError(`FLOWRL_BACKEND must be one of ${BACKEND_CHOICES.join(', ')}; got '${env}'`);
  return env as BackendChoice;
}

/**
 * Selects and initialises the tfjs backend once per process and prints the choice once.
 * `auto` tries tfjs-node-gpu, tfjs-node, webgpu on a hardware GPU, wasm, then cpu. FLOWRL_BACKEND
 * replaces the choice unless `exact` (worker threads, which must run what their parent runs).
 */
export async function initEngine(requested: BackendChoice = 'auto', options: { quiet?: boolean; native?: NativeChoice; exact?: boolean } = {}): Promise<EngineInfo> {
  if (!BACKEND_CHOICES.includes(requested)) {
    throw new InputError(`backend must be one of ${BACKEND_CHOICES.join(', ')}; got '${String(requested)}'`);
  }
  const choice = options.exact ? requested : backendChoiceFromEnv(requested);
  const native = resolveNativeChoice(options.native ?? 'auto');
  if (!NATIVE_CHOICES.includes(native)) throw new InputError(`engine.native must be one of ${NATIVE_CHOICES.join(', ')}; got '${String(native)}'`);
  // Read by the addon (native/pool.c), which takes anything else for auto.
  const oversubscribe = process.env.FLOWRL_OVERSUBSCRIBE;
  if (oversubscribe !== undefined && !['auto', 'on', 'off'].includes(oversubscribe))
    throw new InputError(`FLOWRL_OVERSUBSCRIBE must be auto, on or off; got '${oversubscribe}'`);
  if (active && (choice === 'auto' || choice === active.backend)) {
    if (active.backend === 'wasm' && native !== activeNative) accelerate(active, native);
    return active;
  }

  let info: EngineInfo | undefined;
  if (choice === 'auto' || choice === 'tensorflow') {
    const binding = await tryNodeBinding();
    if (binding && (await tf.setBackend('tensorflow'))) info = { backend: 'tensorflow', binding, accelerations: [] };
    else if (choice === 'tensorflow') {
      throw new InputError(`engine.backend is 'tensorflow' but neither ${NODE_BINDINGS.join(' nor ')} could be loaded (install one, or use auto)`);
    }
  }
  let gpuNotChosen: { gpu?: GpuAdapterReport; reason: string } | undefined;
  if (!info && (choice === 'auto' || choice === 'webgpu')) {
    const gpu = await tryWebgpu(choice);
    info = gpu.info;
    if (!info) gpuNotChosen = gpu;
  }
  if (!info && (choice === 'auto' || choice === 'wasm')) {
    if (await tryWasm()) info = { backend: 'wasm', simd: Boolean(tf.env().getAsync ? await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT') : false), accelerations: [] };
    else if (choice === 'wasm') throw new InputError("engine.backend is 'wasm' but the wasm backend failed to initialise (use auto or cpu)");
  }
  if (!info) {
    await tf.setBackend('cpu');
    info = { backend: 'cpu', accelerations: [] };
  }
  await tf.ready();
  if (gpuNotChosen && choice === 'auto') Object.assign(info, { gpu: gpuNotChosen.gpu, gpuNotChosen: gpuNotChosen.reason });
  if (info.backend === 'wasm') {
    guardWasmAllocations();
    accelerate(info, native);
  }
  active = info;
  // Under mpirun only rank 0 says it: the ranks' engine paths are checked to be the same.
  if (!announced && !options.quiet && launchedRank() === 0) for (const line of engineBanner(info)) process.stderr.write(`${line}\n`);
  announced = true;
  return info;
}

export function engineInfo(): EngineInfo | undefined {
  return active;
}

/** The most memory a WebAssembly instance addresses (32-bit), which the wasm backend's heap grows to. */
export const WASM_HEAP_LIMIT = 4 * 2 ** 30;

/** A tensor the wasm heap could not make room for. */
export class WasmHeapExhausted extends Error {}

/**
 * tfjs's wasm backend takes the allocator's 0 (no room) as an address: every tensor made after the
 * heap is full would share its first bytes, silently. A failed allocation throws instead.
 */
function guardWasmAllocations(): void {
  const module = (tf.backend() as unknown as { wasm: { _malloc(bytes: number): number; _free(at: number): void; flowrlGuarded?: boolean } }).wasm;
  if (module.flowrlGuarded) return;
  // Emscripten's export wrapper replaces itself with the raw function on its first call.
  module._free(module._malloc(1));
  const malloc = module._malloc.bind(module);
  module._malloc = (bytes: number) => {
    // 4 GiB or more would reach malloc as a 32-bit count, wrapped to a small one that fits.
    const at = bytes < 2 ** 32 ? malloc(bytes) : 0;
    if (at === 0 && bytes > 0) throw new WasmHeapExhausted(`no room for a ${(bytes / 2 ** 20).toFixed(0)} MiB tensor`);
    return at;
  };
  module.flowrlGuarded = true;
}

/**
 * A message for the wasm heap out of room: a tensor it could not hold, or a kernel that failed with
 * the heap near its limit (the allocator inside a kernel hands out nothing, the kernel writes out of
 * bounds). Undefined for any other error.
 */
export function wasmHeapExhausted(e: unknown): string | undefined {
  if (tf.getBackend() !== 'wasm' || !(e instanceof WasmHeapExhausted || e instanceof WebAssembly.RuntimeError)) return undefined;
  const heap = (tf.backend() as unknown as { wasm?: { HEAPU8: Uint8Array } }).wasm?.HEAPU8.length ?? 0;
  if (e instanceof WebAssembly.RuntimeError && heap < 0.85 * WASM_HEAP_LIMIT) return undefined;
  return (
    `the wasm engine ran out of memory (${e.message}; its heap at ${(heap / 2 ** 30).toFixed(2)} GiB of the 4 GiB WebAssembly addresses). ` +
    'Lower the micro-batch sizes (actor_rollout_ref.actor.ppo_micro_batch_size, actor_rollout_ref.rollout.log_prob_micro_batch_size, actor_rollout_ref.ref.log_prob_micro_batch_size) ' +
    'or the lengths (data.max_prompt_length, data.max_response_length), set actor_rollout_ref.model.enable_gradient_checkpointing: true, or train LoRA adapters on a frozen base (kept outside the heap)'
  );
}

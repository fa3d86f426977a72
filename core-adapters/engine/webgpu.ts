// The GPU engine path: tfjs's WebGPU backend on Dawn (npm `webgpu`, an optional dependency). Dawn
// reaches Vulkan, Metal and D3D12 GPUs from one code path, and a software Vulkan driver (lavapipe)
// in CI. Three things tfjs 4.22 leaves to the host are done here: the device asks for the adapter's
// storage-buffer limits (tfjs asks for the defaults, and `addN` of more than 7 tensors then reads
// zeros), `addN` is cut into pieces the limit allows, and Dawn's errors (which tfjs never checks:
// a rejected command leaves its outputs zero) are collected and raised at the next readback.
import * as tf from '@tensorflow/tfjs-core';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { GpuDeviceError } from '../errors.js';
import { installWebgpuKernels } from './webgpu-kernels.js';

/** What the banner and `auto` need to know about the adapter Dawn found. */
export interface GpuAdapterReport {
  /** e.g. "NVIDIA H200" or "llvmpipe: Mesa 25.0.7 ...". */
  description: string;
  vendor: string;
  architecture: string;
  /** A CPU implementation (lavapipe, SwiftShader, WARP): correct but slower than the CPU path. */
  software: boolean;
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
  maxStorageBuffersPerShaderStage: number;
  /** shader-f16 and the like. */
  features: string[];
}

/** The adapter Dawn offers, or why there is none (package missing, no driver). */
export type GpuProbe = { adapter: GPUAdapter; report: GpuAdapterReport } | { unavailable: string };


const SOFTWARE_ADAPTER = /llvmpipe|lavapipe|swiftshader|software|microsoft basic render/i;

let probed: Promise<GpuProbe> | undefined;
let dawnGpu: GPU | undefined;

async function loadDawn(): Promise<GPU | string> {
  let dawn: { create(flags: string[]): GPU; globals: object };
  try {
    dawn = (await import('webgpu')) as unknown as typeof dawn;
  } catch (e) {
    return `the optional package 'webgpu' is not installed or does not load here (${(e as Error).message.split('\n')[0]})`;
  }
  // GPUBufferUsage, GPUMapMode and the rest, which tfjs reads as globals.
  for (const [name, value] of Object.entries(dawn.globals)) if (!(name in globalThis)) Object.defineProperty(globalThis, name, { value, configurable: true, writable: true });
  return dawn.create((process.env.FLOWRL_DAWN_FLAGS ?? '').split(',').filter(Boolean));
}

/** What an adapter says about itself, as plain fields (from this process or the probe's). */
interface AdapterFacts {
  info: { description: string; vendor: string; architecture: string; device: string; isFallbackAdapter?: boolean };
  limits: { maxStorageBufferBindingSize: number; maxBufferSize: number; maxStorageBuffersPerShaderStage: number };
  features: string[];
}

function adapterReport({ info, limits, features }: AdapterFacts): GpuAdapterReport {
  const description = info.description || [info.vendor, info.device].filter(Boolean).join(' ') || 'unnamed adapter';
  return {
    description,
    vendor: info.vendor,
    architecture: info.architecture,
    software: info.isFallbackAdapter === true || info.architecture === 'software' || SOFTWARE_ADAPTER.test(`${description} ${info.device}`),
    maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize,
    maxBufferSize: limits.maxBufferSize,
    maxStorageBuffersPerShaderStage: limits.maxStorageBuffersPerShaderStage,
    features: [...features].sort(),
  };
}

// The probe child: prints the adapter's facts as JSON (null: none). argv[1] is Dawn's module URL.
const PROBE_SCRIPT = `
const { create } = await import(process.argv[1]);
const adapter = await create([]).requestAdapter({ powerPreference: 'high-performance' });
const facts = adapter && {
  info: (({ description, vendor, architecture, device, isFallbackAdapter }) => ({ description, vendor, architecture, device, isFallbackAdapter }))(adapter.info),
  limits: (({ maxStorageBufferBindingSize, maxBufferSize, maxStorageBuffersPerShaderStage }) => ({ maxStorageBufferBindingSize, maxBufferSize, maxStorageBuffersPerShaderStage }))(adapter.limits),
  features: [...adapter.features],
};
process.stdout.write(JSON.stringify(facts) + '\\n');
process.exit(0);
`;

let childProbe: GpuAdapterReport | { unavailable: string } | undefined;

/** Vulkan loader variables that name a driver's manifest (loader 1.3.207+; VK_ICD_FILENAMES before). */
const VULKAN_DRIVER_VARIABLES = ['VK_DRIVER_FILES', 'VK_ADD_DRIVER_FILES', 'VK_ICD_FILENAMES'];

/**
 * Why probing for a GPU is pointless here, or undefined when it may find one. On Linux a hardware
 * Vulkan driver opens a device node: Mesa's a DRM render node /dev/dri/renderD* (its drivers list
 * GPUs with libdrm's drmGetDevices2 and keep DRM_NODE_RENDER ones; Debian 12's Mesa 22.3.6 radv and
 * anv import it), NVIDIA's /dev/nvidiactl and /dev/nvidia<N> (libnvidia-container's
 * nvc_internal.h), Mesa's dozen on WSL /dev/dxg.
 * Without one only a software driver can answer, which `auto` passes by anyway; a driver named in
 * the loader's variables is probed regardless (that is how lavapipe is reached in the tests).
 */
export function gpuProbeSkipReason(env: NodeJS.ProcessEnv = process.env, platform: string = process.platform, dev = '/dev'): string | undefined {
  if (platform !== 'linux') return undefined;
  if (VULKAN_DRIVER_VARIABLES.some((name) => env[name])) return undefined;
  const list = (dir: string) => {
    try {
      return readdirSync(dir);
    } catch {
      return [];
    }
  };
  if (list(`${dev}/dri`).some((name) => name.startsWith('renderD'))) return undefined;
  if (list(dev).some((name) => /^nvidia(ctl|\d+)$/.test(name)) || existsSync(`${dev}/dxg`)) return undefined;
  return `no GPU device node (${dev}/dri/renderD*, ${dev}/nvidia*, ${dev}/dxg) and no Vulkan driver named in ${VULKAN_DRIVER_VARIABLES.join('/')}`;
}

/**
 * The adapter as a short child process sees it (about 0.2 s, once). `auto` asks here, so a run on a
 * machine without a GPU never loads Dawn: a Vulkan driver it loads keeps threads, memory (65 MiB)
 * and stderr messages in the process even when Dawn rejects it.
 */
export function probeGpuInChild(): GpuAdapterReport | { unavailable: string } {
  if (childProbe) return childProbe;
  const pointless = gpuProbeSkipReason();
  if (pointless) return (childProbe = { unavailable: pointless });
  let dawn: string;
  try {
    dawn = pathToFileURL(createRequire(import.meta.url).resolve('webgpu')).href;
  } catch {
    return (childProbe = { unavailable: "the optional package 'webgpu' is not installed" });
  }
  const probe = spawnSync(process.execPath, ['--input-type=module', '-e', PROBE_SCRIPT, dawn], { encoding: 'utf8', timeout: 30_000, stdio: ['ignore', 'pipe', 'pipe'] });
  const last = probe.stdout?.trim().split('\n').at(-1);
  if (probe.status !== 0 || !last) return (childProbe = { unavailable: `probing Dawn failed (${probe.error?.message ?? `exit ${probe.status ?? probe.signal}`})` });
  const facts = JSON.parse(last) as AdapterFacts | null;
  return (childProbe = facts ? adapterReport(facts) : { unavailable: 'Dawn found no GPU adapter (no Vulkan, Metal or D3D12 driver it accepts)' });
}

/** Opens Dawn's high-performance adapter in this process, once (Dawn loads only here, on first use). */
export function openGpu(): Promise<GpuProbe> {
  probed ??= (async (): Promise<GpuProbe> => {
    const gpu = await loadDawn();
    if (typeof gpu === 'string') return { unavailable: gpu };
    dawnGpu = gpu;
    let adapter: GPUAdapter | null = null;
    try {
      adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
    } catch (e) {
      return { unavailable: `Dawn found no adapter (${(e as Error).message})` };
    }
    if (!adapter) return { unavailable: 'Dawn found no GPU adapter (no Vulkan, Metal or D3D12 driver it accepts)' };
    const info = adapter.info as GPUAdapterInfo & { isFallbackAdapter?: boolean };
    return { adapter, report: adapterReport({ info, limits: adapter.limits, features: [...adapter.features] }) };
  })();
  return probed;
}

/** One line for the banner: the adapter, its limits and features that matter here. */
export function describeAdapter(report: GpuAdapterReport): string {
  const mib = (n: number) => `${Math.round(n / 2 ** 20)} MiB`;
  const f16 = report.features.includes('shader-f16') ? ', shader-f16' : '';
  return `${report.description}${report.software ? ' (software)' : ''}; storage binding ${mib(report.maxStorageBufferBindingSize)}, buffer ${mib(report.maxBufferSize)}, ${report.maxStorageBuffersPerShaderStage} storage buffers per stage${f16}`;
}

// ---- the device: error collection between readbacks ----

const SCOPES: GPUErrorFilter[] = ['validation', 'out-of-memory', 'internal'];

interface DeviceWatch {
  device: GPUDevice;
  /** Programs dispatched since the last check, by name, for the error message. */
  programs: Map<string, number>;
  uncaptured?: string;
  lost?: string;
  /** FLOWRL_WEBGPU_INJECT_ERROR: a program name whose first dispatch also issues an invalid call (tests). */
  inject?: string;
}

let watch: DeviceWatch | undefined;

function openScopes(device: GPUDevice): void {
  for (const filter of SCOPES) device.pushErrorScope(filter);
}

/** The programs run since the last check, in the order first run (a few dozen kinds at most). */
function programSummary(programs: Map<string, number>): string {
  if (!programs.size) return 'none';
  return [...programs].map(([name, n]) => (n > 1 ? `${name} x${n}` : name)).join(', ');
}

/**
 * Raises the first Dawn error since the last check, naming `operation` and the programs run since.
 * A no-op unless the webgpu backend's device is in use.
 */
export async function checkGpuErrors(operation: string): Promise<void> {
  const w = watch;
  if (!w) return;
  // Popped innermost first; reopened before anything else runs on the device.
  const popped = [...SCOPES].reverse().map(() => w.device.popErrorScope());
  openScopes(w.device);
  const errors = await Promise.all(popped);
  const programs = programSummary(w.programs);
  w.programs.clear();
  const scoped = errors.find((e): e is GPUError => e !== null);
  const message = w.lost ? `device lost: ${w.lost}` : scoped ? `${scoped.constructor.name.replace(/^GPU/, '')}: ${scoped.message}` : w.uncaptured;
  if (!message) return;
  w.uncaptured = undefined;
  throw new GpuDeviceError(`webgpu: ${message.split('\n')[0].trim()} (during ${operation}; GPU programs since the last readback: ${programs}). The results of this step are not trustworthy; the run stops.`);
}

/** The adapter limit on inputs bound by one program (tfjs binds each input and the output). */
let maxBoundInputs = 7;

/** addN in pieces of at most maxBoundInputs tensors: tfjs binds all inputs at once and Dawn then rejects the program. */
function installChunkedAddN(): void {
  const stock = tf.getKernel('AddN', 'webgpu');
  if (!stock || (stock as { flowrlChunked?: boolean }).flowrlChunked) return;
  const run = stock.kernelFunc;
  tf.unregisterKernel('AddN', 'webgpu');
  const kernelFunc: tf.KernelFunc = ({ inputs, backend, attrs }) => {
    let parts = inputs as unknown as tf.TensorInfo[];
    const owned = new Set<tf.TensorInfo>();
    while (parts.length > maxBoundInputs) {
      const next: tf.TensorInfo[] = [];
      for (let i = 0; i < parts.length; i += maxBoundInputs) {
        const piece = parts.slice(i, i + maxBoundInputs);
        if (piece.length === 1) {
          next.push(piece[0]);
          continue;
        }
        const sum = run({ inputs: piece as unknown as tf.NamedTensorInfoMap, backend, attrs }) as tf.TensorInfo;
        owned.add(sum);
        next.push(sum);
      }
      for (const p of parts) if (owned.has(p) && !next.includes(p)) (backend as tf.KernelBackend).disposeData(p.dataId);
      parts = next;
    }
    const out = run({ inputs: parts as unknown as tf.NamedTensorInfoMap, backend, attrs }) as tf.TensorInfo;
    for (const p of parts) if (owned.has(p)) (backend as tf.KernelBackend).disposeData(p.dataId);
    return out;
  };
  tf.registerKernel({ kernelName: 'AddN', backendName: 'webgpu', kernelFunc, flowrlChunked: true } as tf.KernelConfig);
}

/**
 * tfjs-backend-webgpu 4.22 picks a split-K program for a batch-1 product with few outputs and an
 * inner size of 2000 or more, and its vec4 variant ignores transposeB: A @ B^T comes out wrong
 * (max error 3e2 at [40, 5000] @ [64, 5000]^T; the head's backward pass is such a product). There
 * B is transposed first (it has few rows, so the copy is small) and the product taken plainly.
 */
function installSplitKTransposeFix(): void {
  const transpose = tf.getKernel('Transpose', 'webgpu')!.kernelFunc;
  for (const kernelName of ['BatchMatMul', '_FusedMatMul']) {
    const stock = tf.getKernel(kernelName, 'webgpu');
    if (!stock || (stock as { flowrlSplitKFix?: boolean }).flowrlSplitKFix) continue;
    const run = stock.kernelFunc;
    tf.unregisterKernel(kernelName, 'webgpu');
    const kernelFunc: tf.KernelFunc = ({ inputs, backend, attrs }) => {
      const { a, b } = inputs as unknown as { a: tf.TensorInfo; b: tf.TensorInfo };
      const { transposeA, transposeB } = attrs as unknown as { transposeA: boolean; transposeB: boolean };
      if (!transposeB || !splitKCandidate(a.shape, b.shape, transposeA)) return run({ inputs, backend, attrs });
      const rank = b.shape.length;
      const perm = [...Array(rank - 2).keys(), rank - 1, rank - 2];
      const bT = transpose({ inputs: { x: b } as unknown as tf.NamedTensorInfoMap, backend, attrs: { perm } as unknown as tf.NamedAttrMap }) as tf.TensorInfo;
      try {
        return run({ inputs: { ...inputs, b: bT } as tf.NamedTensorInfoMap, backend, attrs: { ...attrs, transposeB: false } as tf.NamedAttrMap });
      } finally {
        (backend as tf.KernelBackend).disposeData(bT.dataId);
      }
    };
    tf.registerKernel({ kernelName, backendName: 'webgpu', kernelFunc, flowrlSplitKFix: true } as tf.KernelConfig);
  }
}

/** A superset of the shapes tfjs sends to its split-K program (batch 1, inner >= 2000, at most 32 tiles of 32 x 32). */
function splitKCandidate(aShape: number[], bShape: number[], transposeA: boolean): boolean {
  const batch = aShape.slice(0, -2).reduce((x, y) => x * y, 1) * bShape.slice(0, -2).reduce((x, y) => x * y, 1);
  const inner = transposeA ? aShape[aShape.length - 2] : aShape[aShape.length - 1];
  const outerA = transposeA ? aShape[aShape.length - 1] : aShape[aShape.length - 2];
  const outerB = bShape[bShape.length - 2];
  return batch === 1 && inner >= 2000 && Math.ceil(outerA / 32) * Math.ceil(outerB / 32) <= 32;
}

interface WebgpuBackendLike {
  runWebGPUProgram(program: object, ...rest: unknown[]): tf.TensorInfo;
}

/** Records each program dispatched (for error messages) and, in tests, injects a Dawn error. */
function traceDispatches(backend: WebgpuBackendLike, w: DeviceWatch): void {
  const run = backend.runWebGPUProgram.bind(backend);
  backend.runWebGPUProgram = (program, ...rest) => {
    const name = program.constructor.name;
    w.programs.set(name, (w.programs.get(name) ?? 0) + 1);
    if (w.inject && name === w.inject) {
      w.inject = undefined;
      // MAP_READ may only pair with COPY_DST: Dawn rejects this buffer, as it would a bad dispatch.
      w.device.createBuffer({ size: 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.STORAGE, label: `flowrl injected error at ${name}` });
    }
    return run(program, ...rest);
  };
}

let registered = false;

/**
 * Registers tfjs's 'webgpu' backend on Dawn's adapter, with the adapter's limits and the error
 * collection above. Call after probeGpu found an adapter; tf.setBackend('webgpu') then creates it.
 */
export async function registerWebgpuBackend(adapter: GPUAdapter): Promise<void> {
  if (registered) return;
  // Imported while navigator.gpu is unset, so the package's own factory (default limits) stays out.
  const { WebGPUBackend } = await import('@tensorflow/tfjs-backend-webgpu');
  // tfjs checks navigator.gpu when it builds the backend (Node 20 has no navigator; 21+ has one without gpu).
  const nav = ((globalThis as { navigator?: object }).navigator ??= {}) as { gpu?: GPU };
  if (!nav.gpu) Object.defineProperty(nav, 'gpu', { value: dawnGpu, configurable: true, writable: true });
  tf.registerBackend('webgpu', async () => {
    const limits = adapter.limits;
    const requiredFeatures = (['timestamp-query'] as GPUFeatureName[]).filter((f) => adapter.features.has(f));
    const device = await adapter.requestDevice({
      requiredFeatures,
      requiredLimits: {
        maxComputeWorkgroupStorageSize: limits.maxComputeWorkgroupStorageSize,
        maxComputeWorkgroupsPerDimension: limits.maxComputeWorkgroupsPerDimension,
        maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize,
        maxBufferSize: limits.maxBufferSize,
        maxComputeWorkgroupSizeX: limits.maxComputeWorkgroupSizeX,
        maxComputeInvocationsPerWorkgroup: limits.maxComputeInvocationsPerWorkgroup,
        maxStorageBuffersPerShaderStage: limits.maxStorageBuffersPerShaderStage,
      },
    });
    maxBoundInputs = Math.max(2, device.limits.maxStorageBuffersPerShaderStage - 1);
    const w: DeviceWatch = { device, programs: new Map(), inject: process.env.FLOWRL_WEBGPU_INJECT_ERROR || undefined };
    device.addEventListener('uncapturederror', (event) => {
      w.uncaptured ??= (event as GPUUncapturedErrorEvent).error.message;
    });
    void device.lost.then((info) => {
      w.lost = `${info.reason}: ${info.message}`;
    });
    openScopes(device);
    const backend = new WebGPUBackend(device, adapter.info);
    traceDispatches(backend as unknown as WebgpuBackendLike, w);
    watch = w;
    return backend;
  }, 1);
  // Every kernel on the GPU: no hand-off of small ops to the cpu backend between GPU ops.
  tf.env().set('WEBGPU_CPU_FORWARD', false);
  installChunkedAddN();
  installSplitKTransposeFix();
  installWebgpuKernels();
  registered = true;
}

/**
 * The webgpu device's limit on one storage binding while webgpu is the active backend (else
 * undefined); FLOWRL_WEBGPU_BINDING_LIMIT (bytes) lowers it, so tests split small models.
 */
export function gpuBindingLimit(): number | undefined {
  const limit = tf.getBackend() === 'webgpu' ? watch?.device.limits.maxStorageBufferBindingSize : undefined;
  const lowered = Number(process.env.FLOWRL_WEBGPU_BINDING_LIMIT);
  return limit !== undefined && lowered > 0 ? Math.min(limit, lowered) : limit;
}

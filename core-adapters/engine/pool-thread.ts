// Entry of a data-parallel pool thread (see thread-pool.ts): its own tfjs engine, a replica built
// from the spec, then a loop that sleeps on the shared control words and runs each posted task.
import 'reflect-metadata';
import { receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import * as tf from '@tensorflow/tfjs-core';
import type { NativeChoice } from '../config/choices.js';
import { initEngine } from './backend.js';
import { loadNativeKernels } from './native.js';
import type { Replica, ReplicaSpec } from './replica.js';

interface WorkerInit {
  index: number;
  port: MessagePort;
  spec: ReplicaSpec;
  control: Int32Array;
  params: Float32Array;
  grads: Float32Array;
  layout: { name: string; offset: number; shape: number[] }[];
  native: NativeChoice;
}

const init = workerData as WorkerInit;
const taskSlot = 1 + 2 * init.index;
const doneSlot = 2 + 2 * init.index;

async function main(): Promise<void> {
  await initEngine('wasm', { quiet: true, native: init.native, exact: true });
  // One BLAS thread per worker: the workers themselves fill the cores.
  loadNativeKernels().kernels?.setThreads(1);
  const module = (await import(init.spec.module)) as Record<string, (args: unknown) => Promise<Replica> | Replica>;
  const replica = await module[init.spec.factory](init.spec.args);
  init.port.postMessage({ ready: true });
  let version = 0;
  let seen = 0;
  for (;;) {
    Atomics.wait(init.control, taskSlot, seen);
    const seq = Atomics.load(init.control, taskSlot);
    if (seq < 0) return;
    if (seq === seen) continue;
    seen = seq;
    const message = receiveMessageOnPort(init.port)?.message as { seq: number; task: unknown; stop?: boolean } | undefined;
    if (!message || message.stop) return;
    try {
      const current = Atomics.load(init.control, 0);
      if (current !== version) {
        for (const { name, offset, shape } of init.layout) {
          const variable = replica.params.get(name);
          if (!variable) continue;
          const size = shape.reduce((a, b) => a * b, 1);
          tf.tidy(() => variable.assign(tf.tensor(init.params.slice(offset, offset + size), shape)));
        }
        version = current;
      }
      const out = await replica.run(message.task);
      let gradNames: string[] | undefined;
      if (out.grads) {
        gradNames = [];
        for (const { name, offset } of init.layout) {
          const g = out.grads.get(name);
          if (!g) continue;
          init.grads.set(g.dataSync() as Float32Array, offset);
          gradNames.push(name);
        }
        tf.dispose([...out.grads.values()]);
      }
      init.port.postMessage({ seq, result: out.result, gradNames });
    } catch (e) {
      init.port.postMessage({ seq, error: (e as Error).stack ?? String(e) });
    }
    Atomics.store(init.control, doneSlot, seq);
    Atomics.notify(init.control, doneSlot);
  }
}

main().catch((e) => {
  init.port.postMessage({ error: (e as Error).stack ?? String(e) });
});

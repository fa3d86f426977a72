// The thread of a tracker that speaks a server's API (see tracker-sink.ts): one client, MLflow's or
// W&B's, sending what the trainer's thread posts, in order, while that thread computes; warnings go
// back to be printed there.
import { parentPort, workerData } from 'node:worker_threads';
import type { Config } from '../config/load.js';
import { MlflowClient } from './mlflow-client.js';
import type { TrackerClient, TrackerKind, TrackerMessage } from './tracker-client.js';
import { WandbClient } from './wandb-client.js';

const { kind, config } = workerData as { kind: TrackerKind; config: Config };
const warn = (line: string) => parentPort!.postMessage({ type: 'warn', line });
const say = (line: string) => parentPort!.postMessage({ type: 'say', line });
const client: TrackerClient = kind === 'mlflow' ? new MlflowClient(config, warn, say) : new WandbClient(config, warn, say);

parentPort!.on('message', (m: TrackerMessage) => {
  if (m.type === 'begin') client.begin();
  else if (m.type === 'log') client.log(m.step, m.metrics, m.timestamp);
  else if (m.type === 'generations') client.logGenerations?.(m.step, m.generations);
  else if (m.type === 'close') client.close(m.status);
  else void client.flush().then(() => parentPort!.postMessage({ type: 'flushed', id: m.id }));
});

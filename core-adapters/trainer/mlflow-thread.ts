// The MLflow sink's thread (see mlflow.ts): one MlflowClient sending what the trainer's thread
// posts, in order, while that thread computes; warnings go back to be printed there.
import { parentPort, workerData } from 'node:worker_threads';
import type { Config } from '../config/load.js';
import { MlflowClient, type MlflowMessage } from './mlflow-client.js';

const client = new MlflowClient((workerData as { config: Config }).config, (line) => parentPort!.postMessage({ type: 'warn', line }));

parentPort!.on('message', (m: MlflowMessage) => {
  if (m.type === 'begin') client.begin();
  else if (m.type === 'log') client.log(m.step, m.metrics, m.timestamp);
  else if (m.type === 'generations') client.logGenerations(m.step, m.generations);
  else if (m.type === 'close') client.close(m.status);
  else void client.flush().then(() => parentPort!.postMessage({ type: 'flushed', id: m.id }));
});

// MLflow (trainer.logger: mlflow): the trainer's sink, whose calls an MlflowClient (mlflow-client.ts:
// the REST calls, verl's keys and params, retries) makes on a thread of its own (tracker-sink.ts).
import { inject, injectable } from 'inversify';
import type { Config } from '../config/load.js';
import { TOKENS } from '../tokens.js';
import { mlflowBase } from './mlflow-client.js';
import { ThreadedTrackerSink } from './tracker-sink.js';

export { mlflowBase, mlflowKey, mlflowParams } from './mlflow-client.js';

@injectable()
export class MlflowSink extends ThreadedTrackerSink {
  constructor(@inject(TOKENS.Config) config: Config) {
    mlflowBase(); // a missing or local-store MLFLOW_TRACKING_URI is refused here, before the thread starts
    super('mlflow', 'MLflow', config);
  }

  logGenerations(step: number, generations: { prompt: string; response: string; score: number }[]): void {
    this.logGenerationsOnThread(step, generations);
  }
}

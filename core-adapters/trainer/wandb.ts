// W&B (trainer.logger: wandb): the trainer's sink, whose calls a WandbClient (wandb-client.ts: the
// GraphQL run and the file stream W&B's own client uses, retries, rows kept through an outage)
// makes on a thread of its own (tracker-sink.ts).
import { inject, injectable } from 'inversify';
import type { Config } from '../config/load.js';
import { TOKENS } from '../tokens.js';
import { ThreadedTrackerSink } from './tracker-sink.js';
import { wandbSettings } from './wandb-client.js';

export { netrcPassword, wandbAppUrl, wandbConfig, wandbSettings } from './wandb-client.js';

@injectable()
export class WandbSink extends ThreadedTrackerSink {
  constructor(@inject(TOKENS.Config) config: Config) {
    wandbSettings(); // a missing key or an offline mode is refused here, before the thread starts
    super('wandb', 'W&B', config);
  }
}

// The async trainer's rollouts (trainer.v1.trainer_mode separate_async; verl's V1 async trainer at
// verl main 1dda039, docs/advance/v1_async_trainer.md): prompt groups are sampled on the rollout
// servers continuously, each launched with the weights of its moment, while the trainer updates;
// a step trains on train_batch_size finished groups. A group's age is the weight versions between
// its launch and the step that trains it, bounded by max_off_policy_threshold:
//   wait: steps take groups in launch order, waiting for each, and at most (threshold + 1) x
//         train_batch_size groups are ever out, so a group is trained within threshold updates;
//   drop: steps take the oldest finished groups; one older than the threshold is dropped (and its
//         place goes to a new prompt).
// Groups are launched as the synchronous trainer samples its steps (the same prompts, uids and
// seeds per launch batch), so with threshold 0 the two train on the same batches.
import type { Batch } from '../batch.js';
import type { Metrics } from '../contracts/index.js';
import { concatRollouts } from '../workers/sequences.js';
import { TOKEN_WEIGHT_VERSIONS } from '../rollout/server-rollout.js';

/** One prompt group of a launch batch, to launch or launched. */
interface Group {
  /** Launch order. */
  seq: number;
  /** Its launch batch (the synchronous step it matches) and its place in it. */
  launch: number;
  index: number;
  /** The policy version when it was launched. */
  launchVersion: number;
  /** Resolved when its samples are in. */
  done?: Promise<void>;
  batch?: Batch;
  error?: unknown;
  /** Past the threshold under drop: discarded when it finishes. */
  dropped?: boolean;
  finished?: boolean;
}

/** What the trainer gives the async rollouts. */
export interface AsyncRolloutHost {
  /** The first launch batch's number (a resumed run goes on from its checkpoint's). */
  firstLaunch: number;
  trainBatchSize: number;
  threshold: number;
  strategy: 'drop' | 'wait';
  /** The policy's version now (updates and restores so far). */
  version(): number;
  /** Groups the run still trains (this step's included): none is launched beyond them. */
  wanted(): number;
  /** Draws launch batch `launch`'s prompts from the data (advancing the cursor) and returns how many groups it has. */
  drawLaunch(launch: number): number;
  /** Samples group `index` of launch batch `launch` (rows index × n.. of that batch, its seed). */
  sample(launch: number, index: number): Promise<Batch>;
}

/** The rollout's per-call counters (retries, resumes, ejections...) summed over the groups a step trains (concatenation keeps one group's). */
const SUMMED_COUNTERS = ['rollout/retries', 'rollout/partial_resumed', 'rollout/update_redraws', 'rollout/stale_dropped', 'rollout/ejections', 'rollout/rejoins'];

function summedCounters(batches: Batch[]): Metrics {
  const out: Metrics = {};
  for (const b of batches) {
    const m = (b.meta.metrics ?? {}) as Metrics;
    for (const key of SUMMED_COUNTERS) if (typeof m[key] === 'number') out[key] = (out[key] ?? 0) + m[key];
  }
  return out;
}

/** A metric family's mean, max and min, as verl reports them. */
function stats(prefix: string, values: number[]): Metrics {
  if (!values.length) return {};
  return { [`${prefix}/mean`]: values.reduce((a, v) => a + v, 0) / values.length, [`${prefix}/max`]: Math.max(...values), [`${prefix}/min`]: Math.min(...values) };
}

export class AsyncRollouts {
  private readonly groups: Group[] = [];
  /** Groups of drawn launch batches not yet launched. */
  private readonly pending: Group[] = [];
  private seq = 0;
  /** The last launch batch drawn. */
  private launches: number;
  /** Wakes a step waiting for a group to finish. */
  private wake?: () => void;
  private dropped = 0;

  constructor(private readonly host: AsyncRolloutHost) {
    this.launches = host.firstLaunch - 1;
  }

  /** Groups out at most: launched and not yet trained (dropped ones excepted). */
  private get capacity(): number {
    return (this.host.threshold + 1) * this.host.trainBatchSize;
  }

  /** The oldest launch batch a step has not fully trained: where a resumed run starts drawing again. */
  get resumeLaunch(): number {
    const open = [...this.groups, ...this.pending].filter((g) => !g.dropped);
    return open.length ? Math.min(...open.map((g) => g.launch)) : this.launches + 1;
  }

  /** Launches groups while fewer than the capacity are out (and the run still needs more). */
  private fill(): void {
    for (;;) {
      const live = this.groups.filter((g) => !g.dropped).length;
      if (live >= Math.min(this.capacity, this.host.wanted())) return;
      if (!this.pending.length) {
        const launch = ++this.launches;
        const size = this.host.drawLaunch(launch);
        for (let index = 0; index < size; index++) this.pending.push({ seq: 0, launch, index, launchVersion: 0 });
      }
      const group = this.pending.shift()!;
      group.seq = this.seq++;
      group.launchVersion = this.host.version();
      group.done = this.host.sample(group.launch, group.index).then(
        (batch) => {
          group.finished = true;
          if (group.dropped) batch.dispose();
          else group.batch = batch;
        },
        (e: unknown) => {
          group.finished = true;
          group.error = e;
        },
      );
      void group.done.finally(() => this.wake?.());
      this.groups.push(group);
    }
  }

  /** Waits until some group finishes. */
  private async settled(): Promise<void> {
    await new Promise<void>((resolve) => (this.wake = resolve));
  }

  /**
   * The next step's batch: train_batch_size finished groups, oldest launched first (concatenated
   * in launch order), with verl's off-policy metrics of it. A group's failure stops the step.
   */
  async nextBatch(): Promise<{ batch: Batch; metrics: Metrics }> {
    const want = this.host.trainBatchSize;
    for (;;) {
      this.fill();
      const now = this.host.version();
      if (this.host.strategy === 'drop') {
        for (const g of this.groups) {
          if (!g.dropped && now - g.launchVersion > this.host.threshold) {
            g.dropped = true;
            this.dropped += 1;
            g.batch?.dispose();
            g.batch = undefined;
          }
        }
        // A dropped group leaves once its requests are done (drain waits for those still out).
        this.remove((g) => g.dropped === true && g.finished === true);
      }
      const failed = this.groups.find((g) => g.error !== undefined && !g.dropped);
      if (failed) throw failed.error;
      const live = this.groups.filter((g) => !g.dropped);
      // wait: the oldest groups, each waited for; drop: the oldest finished ones.
      const ready = this.host.strategy === 'wait' ? live.slice(0, want) : live.filter((g) => g.batch);
      if (ready.length >= want && ready.slice(0, want).every((g) => g.batch)) {
        const taken = ready.slice(0, want).sort((a, b) => a.seq - b.seq);
        this.remove((g) => taken.includes(g));
        const batch = concatRollouts(taken.map((g) => g.batch!));
        const metrics = { ...summedCounters(taken.map((g) => g.batch!)), ...this.offPolicyMetrics(batch, taken, now) };
        taken.forEach((g) => g.batch!.dispose());
        return { batch, metrics };
      }
      await this.settled();
    }
  }

  private remove(which: (g: Group) => boolean): void {
    for (let i = this.groups.length - 1; i >= 0; i--) if (which(this.groups[i])) this.groups.splice(i, 1);
  }

  /**
   * verl's training/off_policy metrics: per trajectory, how many versions drew it (spans), how far
   * the newest of them is behind the trained version (staleness) and the oldest (staleness_worst);
   * a group's launch version counts as its oldest. Plus groups dropped for staleness so far.
   */
  private offPolicyMetrics(batch: Batch, groups: Group[], now: number): Metrics {
    const versions = batch.has(TOKEN_WEIGHT_VERSIONS) ? batch.column<number[]>(TOKEN_WEIGHT_VERSIONS) : [];
    const launchOf: number[] = groups.flatMap((g) => Array.from({ length: g.batch!.size }, () => g.launchVersion));
    const spans: number[] = [];
    const staleness: number[] = [];
    const worst: number[] = [];
    launchOf.forEach((launched, row) => {
      const own = versions[row]?.length ? versions[row] : [launched];
      spans.push(new Set(own).size);
      staleness.push(now - Math.max(...own));
      worst.push(now - Math.min(launched, ...own));
    });
    return {
      ...stats('training/off_policy/trajectory_spans', spans),
      ...stats('training/off_policy/trajectory_staleness', staleness),
      ...stats('training/off_policy/trajectory_staleness_worst', worst),
      'training/off_policy/dropped_groups': this.dropped,
      'training/off_policy/groups_out': this.groups.filter((g) => !g.dropped).length,
    };
  }

  /** Waits out every launched group (a stop, the end): no request outlives the run. */
  async drain(): Promise<void> {
    await Promise.all(this.groups.map((g) => g.done ?? Promise.resolve()));
    for (const g of this.groups) g.batch?.dispose();
    this.groups.length = 0;
  }
}

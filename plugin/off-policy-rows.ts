// Off-policy training rows (flowrl.replay_samples, reference_samples, explore_temperature) for any
// algorithm: a trainer that puts past correct answers, reference samples and tempered samples in
// some rows of each prompt group, and a worker that keeps the replay and samples the reference.
// FlowRL's trainer and worker extend these; with another algorithm (e.g. GRPO with flowrl-matching's
// replay and exploration, to isolate what FlowRL's objective adds) the plugin binds them directly.
// Every row is then trained as if the policy had drawn it: the old log-probs are recomputed by the
// actor, so a ratio-based loss sees ratio 1 on the first update, as it does on sampled rows.
import { inject, injectable, injectFromBase } from 'inversify';
import { ActorRolloutRefWorker, RLTrainer, Rng, rowsByGroup, samplePolicy, sequencesFromSamples, type ActorStepListener, type Batch, type Metrics, type SamplingSettings } from '../core-adapters/index.js';
import { flowrlConfig, usesOffPolicyRows, usesReplay } from './config.js';
import { FLOWRL_REPLAY, type CorrectReplay } from './replay.js';

/** Where a training row's response came from ('explore': the policy at flowrl.explore_temperature). */
type RowSource = 'policy' | 'explore' | 'reference' | 'replay';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class OffPolicyRowsWorker extends ActorRolloutRefWorker {
  @inject(FLOWRL_REPLAY) protected readonly replay!: CorrectReplay;

  private warnedNoRows = false;

  /** With flowrl.replay_samples (or explore_temperature, which reads which prompts are solved), the batch's correct answers join the replay before the update. */
  override updateActor(batch: Batch, listeners: ActorStepListener[] = []): Promise<Metrics> {
    const flowrl = flowrlConfig(this.config);
    // OffPolicyRowsTrainer marks every row's source; a Trainer another plugin bound (one that extends this one) makes no rows.
    if (usesOffPolicyRows(flowrl) && !batch.has('source') && !this.warnedNoRows) {
      this.warnedNoRows = true;
      console.warn("[flowrl] flowrl.replay_samples / reference_samples / explore_temperature are set, but the Trainer is not the FlowRL plugin's (another plugin replaced it): no off-policy rows are made");
    }
    if (usesReplay(flowrl)) this.replay.record(batch);
    return super.updateActor(batch, listeners);
  }

  /**
   * Samples prompts with the reference policy (flowrl.reference_samples), in this thread: the frozen
   * initial weights, or with LoRA the base with its adapters off.
   */
  sampleReference(prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    this.loadReference();
    const lm = this.module.lm.adapters ? this.module.lm : this.reference!;
    const policy = { module: { ...this.module, lm, pool: undefined }, stopTokenIds: this.stopTokenIds(), padTokenId: this.padTokenId, writeWeights: async () => ({ adapter: false }) };
    return lm.withoutAdapters(() => samplePolicy(policy, prompts, sampling, this.config.actor_rollout_ref.rollout.generation_batch_size));
  }

  override async saveCheckpoint(dir: string): Promise<void> {
    await super.saveCheckpoint(dir);
    if (usesReplay(flowrlConfig(this.config))) this.replay.save(dir);
  }

  override loadCheckpoint(dir: string): void {
    super.loadCheckpoint(dir);
    this.replay.load(dir);
  }
}

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class OffPolicyRowsTrainer extends RLTrainer {
  @inject(FLOWRL_REPLAY) protected readonly replay!: CorrectReplay;

  override async setup(): Promise<void> {
    flowrlConfig(this.config);
    await super.setup();
  }

  /**
   * The first flowrl.reference_samples rows of each prompt group are sampled from the reference
   * policy, and the last flowrl.replay_samples rows, where the prompt has known correct answers,
   * drawn from the replay (uniformly, seeded by the step). The rest are sampled from the policy:
   * with flowrl.explore_temperature, at that temperature for prompts with a correct answer on
   * record. The 'source' column says which (policy, explore, reference, replay).
   */
  protected override async generateRollouts(prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    const flowrl = flowrlConfig(this.config);
    if (!usesOffPolicyRows(flowrl)) return await super.generateRollouts(prompts, sampling);
    const rng = Rng.derive(this.config.trainer.seed, 1_000_003 + this.rolloutStep);
    const promptIds = prompts.column<number[]>('prompt_ids');
    const source: RowSource[] = promptIds.map(() => 'policy');
    const responses: number[][] = new Array(prompts.size);
    for (const rows of rowsByGroup(prompts.column<string>('uid'))) {
      rows.slice(0, flowrl.reference_samples).forEach((row) => (source[row] = 'reference'));
      for (const row of rows.slice(rows.length - flowrl.replay_samples)) {
        const answer = this.replay.draw(promptIds[row], rng);
        if (answer) [source[row], responses[row]] = ['replay', answer];
      }
      // Exploration is for prompts already solved, whose other answers the policy can lose; an
      // unsolved prompt keeps the policy's own best guesses.
      if (flowrl.explore_temperature !== null && this.replay.size(promptIds[rows[0]]) > 0) {
        for (const row of rows) if (source[row] === 'policy') source[row] = 'explore';
      }
    }
    const worker = this.worker as OffPolicyRowsWorker;
    const rowsOf = (from: RowSource) => source.flatMap((s, row) => (s === from ? [row] : []));
    const fill = (rows: number[], sampled: Batch) => {
      const ids = sampled.tensor('responses');
      const mask = sampled.tensor('response_mask').data;
      const R = ids.shape[1];
      rows.forEach((row, i) => (responses[row] = Array.from(ids.data.subarray(i * R, (i + 1) * R)).filter((_, t) => mask[i * R + t])));
      sampled.dispose();
    };
    const referenceRows = rowsOf('reference');
    if (referenceRows.length) fill(referenceRows, await worker.sampleReference(prompts.selectRows(referenceRows), { ...sampling, seed: sampling.seed + 0x3c6ef372 }));
    let meta: Record<string, unknown> | undefined;
    for (const [from, settings] of [
      ['policy', sampling],
      // Every log-prob stays at the rollout temperature: only the proposal changes.
      ['explore', { ...sampling, temperature: flowrl.explore_temperature ?? sampling.temperature, greedy: false, seed: sampling.seed + 0x2545f491 }],
    ] as const) {
      const rows = rowsOf(from);
      if (!rows.length) continue;
      const sampled = await super.generateRollouts(prompts.selectRows(rows), settings);
      meta ??= sampled.meta;
      fill(rows, sampled);
    }
    const out = prompts.select([]);
    const fraction = (from: RowSource) => rowsOf(from).length / prompts.size;
    const metrics = { 'flowrl/replay_fraction': fraction('replay'), 'flowrl/reference_fraction': fraction('reference'), 'flowrl/explore_fraction': fraction('explore') };
    out.meta = { ...meta, metrics: { ...((meta?.metrics as object | undefined) ?? {}), ...metrics } };
    for (const [name, tensor] of Object.entries(sequencesFromSamples(promptIds, responses, sampling.maxNewTokens, worker.padTokenId))) out.set(name, tensor);
    out.setColumn('source', source);
    return out;
  }
}

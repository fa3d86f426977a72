// The FlowRL trainer: the core trainer unchanged, with FlowRL's requirements declared and checked,
// and (flowrl.replay_samples) some rows of each prompt group taken from the replay of past correct
// answers instead of being sampled.
import { inject, injectable, injectFromBase } from 'inversify';
import { InputError, RLTrainer, Rng, rowsByGroup, sequencesFromSamples, type Batch, type SamplingSettings } from '../core-adapters/index.js';
import { flowrlConfig } from './config.js';
import type { FlowRLWorker } from './flowrl-worker.js';
import { FLOWRL_REPLAY, type CorrectReplay } from './replay.js';

/** Where a training row's response came from ('explore': the policy at flowrl.explore_temperature). */
type RowSource = 'policy' | 'explore' | 'reference' | 'replay';

@injectable()
@injectFromBase({ extendConstructorArguments: true })
export class FlowRLTrainer extends RLTrainer {
  @inject(FLOWRL_REPLAY) protected readonly replay!: CorrectReplay;

  /** FlowRL reads group-normalised (GRPO) advantages and the reference policy, and trains no critic. */
  override async setup(): Promise<void> {
    const r = this.requirements;
    if (r.advEstimator !== 'grpo') {
      throw new InputError(`algorithm.adv_estimator is '${r.advEstimator}'; flowrl's objective reads GRPO advantages (leave it null or set grpo)`);
    }
    if (!r.useReference) throw new InputError("plugin.json: algorithm flowrl must declare needs_reference_policy: true (its objective reads the reference policy)");
    flowrlConfig(this.config);
    await super.setup();
  }

  /**
   * Off-policy rows, which trajectory balance allows (its fixed point holds for every response,
   * however drawn): the first flowrl.reference_samples rows of each prompt group are sampled from the
   * reference policy, and the last flowrl.replay_samples rows, where the prompt has known correct
   * answers, drawn from the replay (uniformly, seeded by the step). The rest are sampled from the
   * policy: with flowrl.explore_temperature, at that temperature for prompts with a correct answer on
   * record. The 'source' column says which (policy, explore, reference, replay).
   */
  protected override async generateRollouts(prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    const flowrl = flowrlConfig(this.config);
    if (flowrl.replay_samples === 0 && flowrl.reference_samples === 0 && flowrl.explore_temperature === null) return await super.generateRollouts(prompts, sampling);
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
    const rowsOf = (from: RowSource) => source.flatMap((s, row) => (s === from ? [row] : []));
    const fill = (rows: number[], sampled: Batch) => {
      const ids = sampled.tensor('responses');
      const mask = sampled.tensor('response_mask').data;
      const R = ids.shape[1];
      rows.forEach((row, i) => (responses[row] = Array.from(ids.data.subarray(i * R, (i + 1) * R)).filter((_, t) => mask[i * R + t])));
      sampled.dispose();
    };
    const referenceRows = rowsOf('reference');
    if (referenceRows.length) fill(referenceRows, (this.worker as FlowRLWorker).sampleReference(prompts.selectRows(referenceRows), { ...sampling, seed: sampling.seed + 0x3c6ef372 }));
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
    for (const [name, tensor] of Object.entries(sequencesFromSamples(promptIds, responses, sampling.maxNewTokens, (this.worker as FlowRLWorker).padTokenId))) out.set(name, tensor);
    out.setColumn('source', source);
    return out;
  }
}

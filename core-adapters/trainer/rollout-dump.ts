// trainer.rollout_data_dir (verl v0.9.0's key; ray_trainer._log_rollout_data and _write_generations):
// each training step's samples to <dir>/<step>.jsonl, one line per sample with verl's fields (input
// and output decoded without special tokens, gts, score, step, and the scorers' extra fields), and
// this host's: the response's token ids and its loss mask (0 on tool turns in multi-turn rollouts).
import fs from 'node:fs';
import path from 'node:path';
import type { Batch } from '../batch.js';
import type { TextTokenizer } from '../model/tokenizer.js';
import { REWARD_EXTRA_INFO } from '../rewards/manager.js';

/** One dumped sample. */
export interface RolloutRecord {
  input: string;
  output: string;
  gts: unknown;
  score: number;
  step: number;
  response_ids: number[];
  response_mask: number[];
  [extra: string]: unknown;
}

/** The step's samples as records: each row's prompt and response without padding, its score the sum of its token-level scores. */
export function rolloutRecords(batch: Batch, tokenizer: TextTokenizer, step: number): RolloutRecord[] {
  const [B, P] = batch.tensor('prompts').shape;
  const R = batch.tensor('responses').shape[1];
  const L = P + R;
  const prompts = batch.tensor('prompts').data;
  const responses = batch.tensor('responses').data;
  const attention = batch.tensor('attention_mask').data;
  const lossMask = batch.tensor('response_mask').data;
  const scores = batch.tensor('token_level_scores').data;
  const truths = batch.has('ground_truth') ? batch.column('ground_truth') : undefined;
  const extras = batch.has(REWARD_EXTRA_INFO) ? batch.column<Record<string, unknown>>(REWARD_EXTRA_INFO) : undefined;
  return Array.from({ length: B }, (_, b) => {
    const promptIds: number[] = [];
    for (let j = 0; j < P; j++) if (attention[b * L + j]) promptIds.push(prompts[b * P + j]);
    let length = 0;
    while (length < R && attention[b * L + P + length]) length++;
    const ids = Array.from(responses.subarray(b * R, b * R + length));
    let score = 0;
    for (let t = 0; t < R; t++) score += scores[b * R + t];
    return {
      input: tokenizer.decode(promptIds, true),
      output: tokenizer.decode(ids, true),
      gts: truths?.[b] ?? null,
      score,
      step,
      ...(extras?.[b] ?? {}),
      response_ids: ids,
      response_mask: Array.from(lossMask.subarray(b * R, b * R + length)),
    };
  });
}

/** Writes the step's records to <dir>/<step>.jsonl (whole, through a temporary file: a crash leaves no half file). */
export function dumpRollouts(dir: string, step: number, records: RolloutRecord[]): void {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${step}.jsonl`);
  const partial = `${file}.partial`;
  fs.writeFileSync(partial, records.map((r) => JSON.stringify(r) + '\n').join(''));
  fs.renameSync(partial, file);
}

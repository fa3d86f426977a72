// A replay of past correct answers (flowrl.replay_samples): the distinct correct responses found for
// each training prompt, from which the trainer puts some rows of every prompt group in place of fresh
// samples. Trajectory balance is zero at its fixed point for every response, however it was drawn,
// so these off-policy rows keep the same target; they give a correct answer the policy has stopped
// sampling a gradient again (the GFlowNet exploration problem), drawn uniformly so that rare answers
// are pulled to their share as often as common ones.
import fs from 'node:fs';
import path from 'node:path';
import { InputError, type Batch, type Rng } from '../core-adapters/index.js';

export const REPLAY_FILE = 'flowrl_replay.json';
/** The container's one replay, shared by the FlowRL worker (which fills and saves it) and trainer (which draws). */
export const FLOWRL_REPLAY = Symbol.for('flowrl.plugin.CorrectReplay');

const key = (ids: readonly number[]) => ids.join(',');

export class CorrectReplay {
  /** Prompt key -> distinct correct responses (oldest first). */
  private readonly answers = new Map<string, Map<string, number[]>>();

  /** capacity: distinct answers kept per prompt, the oldest dropped first. */
  constructor(readonly capacity: number) {}

  /** Adds the batch's correct responses (rows marked by the trainer's 'correct' column). */
  record(batch: Batch): void {
    const correct = batch.column<boolean>('correct');
    const prompts = batch.column<number[]>('prompt_ids');
    const responses = batch.tensor('responses');
    const mask = batch.tensor('response_mask').data;
    const R = responses.shape[1];
    for (let b = 0; b < batch.size; b++) {
      if (!correct[b]) continue;
      const ids: number[] = [];
      for (let t = 0; t < R; t++) if (mask[b * R + t]) ids.push(responses.data[b * R + t]);
      this.add(prompts[b], ids);
    }
  }

  private add(prompt: readonly number[], response: number[]): void {
    const promptKey = key(prompt);
    let found = this.answers.get(promptKey);
    if (!found) this.answers.set(promptKey, (found = new Map()));
    const responseKey = key(response);
    if (found.has(responseKey)) return;
    found.set(responseKey, response);
    if (found.size > this.capacity) found.delete(found.keys().next().value!);
  }

  /** Distinct correct answers known for a prompt. */
  size(prompt: readonly number[]): number {
    return this.answers.get(key(prompt))?.size ?? 0;
  }

  /** One known answer drawn uniformly; undefined when none is known. */
  draw(prompt: readonly number[], rng: Rng): number[] | undefined {
    const found = this.answers.get(key(prompt));
    if (!found?.size) return undefined;
    const list = [...found.values()];
    return list[Math.min(list.length - 1, Math.floor(rng.next() * list.length))];
  }

  save(dir: string): void {
    const entries = [...this.answers].map(([prompt, found]) => ({ prompt: prompt.split(',').map(Number), responses: [...found.values()] }));
    fs.writeFileSync(path.join(dir, REPLAY_FILE), JSON.stringify(entries) + '\n');
  }

  /** Replaces the contents with a checkpoint's; a checkpoint without the file (replay was off) leaves it empty. */
  load(dir: string): void {
    this.answers.clear();
    const file = path.join(dir, REPLAY_FILE);
    if (!fs.existsSync(file)) return;
    let entries: unknown;
    try {
      entries = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (e) {
      throw new InputError(`${file}: not valid JSON (${(e as Error).message})`);
    }
    const isIds = (v: unknown) => Array.isArray(v) && v.every((x) => Number.isSafeInteger(x) && x >= 0);
    if (!Array.isArray(entries)) throw new InputError(`${file}: expected a list of {prompt, responses}`);
    entries.forEach((entry: { prompt?: unknown; responses?: unknown }, i) => {
      if (!isIds(entry?.prompt) || !Array.isArray(entry.responses) || !entry.responses.every(isIds)) {
        throw new InputError(`${file}: entry ${i} must be {prompt: token ids, responses: lists of token ids}`);
      }
      for (const response of entry.responses as number[][]) this.add(entry.prompt as number[], response);
    });
  }
}

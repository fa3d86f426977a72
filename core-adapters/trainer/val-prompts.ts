// Per-prompt validation results, one JSON object per prompt and validation step in
// <default_local_dir>/val_prompts.jsonl, so runs that validated the same prompts can be compared
// prompt by prompt (flowrl compare's paired bootstrap). Every val/* metric of a prompt's counts
// can be recomputed from a record.
import { readJsonLines } from '../jsonl.js';
import fs from 'node:fs';
import path from 'node:path';
import { InputError } from '../errors.js';
import { restartStepLog } from './metrics.js';

export const VAL_PROMPTS_FILE = 'val_prompts.jsonl';

/** One prompt's results at one validation step, as val_prompts.jsonl holds them. */
export interface ValPromptRecord {
  step: number;
  /** The prompt's row index in the validation split. */
  prompt: number;
  /** FNV-1a of the prompt's token ids (hex): pairs only the same prompts across runs. */
  hash: string;
  /** Samples drawn for the prompt. */
  k: number;
  /** Correct samples among them. */
  correct: number;
  /** Distinct correct responses. */
  distinct: number;
  /** Entropy (nats) of the empirical distribution over the correct responses; 0 with none. */
  entropy: number;
  /** Matching over the prompt's correct set (trainer.val_matching; absent when it had none). */
  matching?: PromptMatchingRecord;
}

/** How the policy and the reference spread a prompt's correct set (trainer/matching.ts). */
export interface PromptMatchingRecord {
  /** true: every correct answer the task lists; false: the distinct correct samples. */
  exact: boolean;
  /** KL(pi(.|S) || pi_ref(.|S)) and total variation. */
  kl: number;
  tv: number;
  entropy: number;
  ref_entropy: number;
  /** pi(S) and pi_ref(S). */
  mass: number;
  ref_mass: number;
  /** The answers' texts (exact sets only), and each model's share of the set, in that order. */
  answers?: string[];
  shares: number[];
  ref_shares: number[];
}

/** Entropy (nats) of the distribution given by counts; 0 for no counts. */
export function countsEntropy(counts: Iterable<number>): number {
  const values = [...counts];
  const total = values.reduce((a, b) => a + b, 0);
  let entropy = 0;
  for (const c of values) entropy -= (c / total) * Math.log(c / total);
  return entropy;
}

export function promptHash(ids: ArrayLike<number>): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < ids.length; i++) {
    h ^= ids[i] & 0xffff;
    h = Math.imul(h, 0x01000193);
    h ^= ids[i] >>> 16;
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, '0');
}

/** Appends records of validation steps to a run's JSONL file; opened like metrics.jsonl when fit starts. */
export class StepRecordLog<R extends object> {
  readonly file: string;

  /** A fresh run starts an empty file; a resumed one keeps the records up to the resumed step. */
  constructor(runDir: string, fileName: string, start: { startStep: number; resumed: boolean }) {
    this.file = path.join(runDir, fileName);
    restartStepLog(this.file, start);
  }

  append(step: number, records: R[]): void {
    fs.appendFileSync(this.file, records.map((r) => JSON.stringify({ step, ...r }) + '\n').join(''));
  }
}

/** The per-prompt records of val_prompts.jsonl. */
export class ValPromptLog extends StepRecordLog<Omit<ValPromptRecord, 'step'>> {
  constructor(runDir: string, start: { startStep: number; resumed: boolean }) {
    super(runDir, VAL_PROMPTS_FILE, start);
  }
}

export const VAL_GENERATIONS_FILE = 'val_generations.jsonl';

/** One logged validation generation (trainer.log_val_generations): the first sample of one of the first prompts. */
export interface ValGeneration {
  step: number;
  prompt: string;
  /** The whole response, tool turns included, without special tokens. */
  response: string;
  score: number;
  /** A multi-turn conversation after the prompt: assistant turns and tool answers. */
  turns?: { role: string; content: string }[];
}

/** The generations of a run's last logged validation step; [] without the file. */
export function readValGenerations(runDir: string): ValGeneration[] {
  const file = path.join(runDir, VAL_GENERATIONS_FILE);
  if (!fs.existsSync(file)) return [];
  const records: ValGeneration[] = [];
  for (const { value, where } of readJsonLines(file)) {
    const r = (value ?? {}) as ValGeneration;
    if (typeof r.step !== 'number' || typeof r.prompt !== 'string' || typeof r.response !== 'string' || typeof r.score !== 'number') throw new InputError(`${where}: expected step, prompt, response and score`);
    if (r.turns !== undefined && !(Array.isArray(r.turns) && r.turns.every((t) => typeof t?.role === 'string' && typeof t?.content === 'string'))) throw new InputError(`${where}: turns must be a list of {role, content}`);
    records.push(r);
  }
  const last = Math.max(-Infinity, ...records.map((r) => r.step));
  return records.filter((r) => r.step === last);
}

/**
 * A run's records of one validation step (the last one logged when `step` is 'final'), by prompt
 * index; null when the run has no such file.
 */
export function readValPrompts(runDir: string, step: number | 'final'): Map<number, ValPromptRecord> | null {
  const file = path.join(runDir, VAL_PROMPTS_FILE);
  if (!fs.existsSync(file)) return null;
  const records: ValPromptRecord[] = [];
  for (const { value, where } of readJsonLines(file)) {
    const record = (value ?? {}) as ValPromptRecord;
    const fields = [record.step, record.prompt, record.k, record.correct, record.distinct, record.entropy];
    if (!fields.every((v) => typeof v === 'number' && Number.isFinite(v))) throw new InputError(`${where}: expected numeric step, prompt, k, correct, distinct and entropy`);
    const m = record.matching;
    if (m !== undefined && !(Array.isArray(m.shares) && Array.isArray(m.ref_shares) && m.shares.length === m.ref_shares.length && (m.answers === undefined || m.answers.length === m.shares.length))) {
      throw new InputError(`${where}: matching needs shares and ref_shares (and answers, when given) of one length`);
    }
    records.push(record);
  }
  const wanted = step === 'final' ? Math.max(-Infinity, ...records.map((r) => r.step)) : step;
  const out = new Map<number, ValPromptRecord>();
  // A repeated (step, prompt), as after a resume that re-ran a step: the later record wins.
  for (const record of records) if (record.step === wanted) out.set(record.prompt, record);
  return out;
}

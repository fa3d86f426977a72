// verl-format dataset rows: reading (.jsonl or .parquet), validation and atomic jsonl writing.
import { readJsonLines } from '../jsonl.js';
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { check, InputError } from '../errors.js';
import type { ChatMessage } from '../model/tokenizer.js';

/** One prompt with what its reward needs, as verl's data_preprocess scripts write it. */
export interface DataRow {
  data_source: string;
  prompt: ChatMessage[];
  ability?: string;
  reward_model: { style: string; ground_truth: unknown };
  extra_info?: Record<string, unknown>;
  /** verl's agent loop for the row (single_turn_agent, tool_agent); absent: rollout.agent.default_agent_loop. */
  agent_name?: string;
}

export const DATA_FILE_EXTENSIONS = ['.jsonl', '.parquet'] as const;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === undefined) return 'missing';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  return `a ${typeof value}`;
}

/** The messages of a prompt, or a description of what is wrong with them. */
function readPrompt(value: unknown): ChatMessage[] | string {
  // Many parquet datasets store the prompt as one string: that is a single user turn.
  if (typeof value === 'string') {
    return value.length > 0 ? [{ role: 'user', content: value }] : 'it is an empty string';
  }
  if (!Array.isArray(value)) return `it is ${describe(value)}`;
  if (value.length === 0) return 'it is empty';
  const messages: ChatMessage[] = [];
  for (let i = 0; i < value.length; i++) {
    const message: unknown = value[i];
    if (!isPlainObject(message)) return `message ${i + 1} is ${describe(message)}`;
    if (typeof message.role !== 'string' || message.role === '') return `message ${i + 1} has no string 'role'`;
    if (typeof message.content !== 'string') return `message ${i + 1} has no string 'content'`;
    messages.push({ role: message.role, content: message.content });
  }
  return messages;
}

/**
 * Checks one decoded row and returns it as a DataRow; `where` names it in errors (e.g.
 * "data/train.jsonl line 7"). A string prompt becomes one user message; a missing reward_model.style
 * means 'rule'; null ability/extra_info count as absent; other keys are dropped.
 */
export function validateRow(value: unknown, where: string): DataRow {
  check(isPlainObject(value), where, `a row must be an object with data_source, prompt and reward_model (got ${describe(value)})`);
  const { data_source: dataSource, reward_model: rewardModel } = value;
  check(typeof dataSource === 'string' && dataSource !== '', where, `key 'data_source' must be a non-empty string (got ${describe(dataSource)})`);
  const prompt = readPrompt(value.prompt);
  check(typeof prompt !== 'string', where, `key 'prompt' must be a non-empty list of {role, content} messages (${prompt})`);

  check(isPlainObject(rewardModel), where, `key 'reward_model' must be an object {style, ground_truth} (got ${describe(rewardModel)})`);
  const style = rewardModel.style ?? 'rule';
  check(typeof style === 'string', where, `key 'reward_model.style' must be a string (got ${describe(style)})`);
  const groundTruth = rewardModel.ground_truth;
  check(groundTruth !== undefined && groundTruth !== null, where, `key 'reward_model.ground_truth' is missing`);

  const ability = value.ability ?? undefined;
  check(ability === undefined || typeof ability === 'string', where, `key 'ability' must be a string (got ${describe(ability)})`);
  const extraInfo = value.extra_info ?? undefined;
  check(extraInfo === undefined || isPlainObject(extraInfo), where, `key 'extra_info' must be an object (got ${describe(extraInfo)})`);

  const agentName = value.agent_name ?? undefined;
  check(agentName === undefined || typeof agentName === 'string', where, `key 'agent_name' must be a string (got ${describe(agentName)})`);

  const row: DataRow = { data_source: dataSource, prompt, reward_model: { style, ground_truth: groundTruth } };
  if (ability !== undefined) row.ability = ability;
  if (agentName !== undefined) row.agent_name = agentName;
  if (extraInfo !== undefined) row.extra_info = extraInfo;
  return row;
}

/**
 * Parquet gives INT64 columns as bigint and some lists as typed arrays; rows must be plain JSON
 * values. Integers beyond 2^53 become strings so ids survive exactly.
 */
function toJsonValue(value: unknown): unknown {
  if (typeof value === 'bigint') {
    return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value.toString();
  }
  if (Array.isArray(value)) return value.map(toJsonValue);
  if (ArrayBuffer.isView(value) && !(value instanceof DataView)) {
    return Array.from(value as unknown as ArrayLike<unknown>, toJsonValue);
  }
  if (isPlainObject(value)) {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) out[key] = toJsonValue(item);
    return out;
  }
  return value;
}

/** Checks one decoded row (validateRow for RL rows) and returns it typed; `where` names it in errors. */
export type RowValidator<T> = (value: unknown, where: string) => T;

function readJsonlRows<T>(file: string, validate: RowValidator<T>): T[] {
  return readJsonLines(file).map(({ value, where }) => validate(value, where));
}

/** The parquet reader's own thread may use this much memory: a damaged file cannot take more. */
const PARQUET_READER_HEAP_MB = 1024;

// Runs in a worker thread: hyparquet reads column chunks concurrently, and when a damaged file
// makes several of them fail, all but the first reject with nobody listening, which would end the
// whole process. In a thread of its own they are ignored, and its memory is capped.
const PARQUET_READER = `
const { parentPort, workerData } = require('node:worker_threads');
process.on('unhandledRejection', () => {});
const hyparquet = import(workerData.hyparquet);
parentPort.on('message', async ({ id, file }) => {
  try {
    const { parquetReadObjects, asyncBufferFromFile } = await hyparquet;
    parentPort.postMessage({ id, records: await parquetReadObjects({ file: await asyncBufferFromFile(file) }) });
  } catch (e) {
    parentPort.postMessage({ id, error: String((e && e.message) || e) });
  }
});`;

type Pending = { resolve: (records: Record<string, unknown>[]) => void; reject: (why: string) => void };
let parquetReader: { worker: Worker; pending: Map<number, Pending>; next: number } | undefined;

/** The reader thread, started on first use and kept (unref'd) for the next file. */
function readerThread(): NonNullable<typeof parquetReader> {
  if (parquetReader) return parquetReader;
  const worker = new Worker(PARQUET_READER, { eval: true, workerData: { hyparquet: import.meta.resolve('hyparquet') }, resourceLimits: { maxOldGenerationSizeMb: PARQUET_READER_HEAP_MB } });
  const reader = { worker, pending: new Map<number, Pending>(), next: 0 };
  worker.unref();
  worker.on('message', (m: { id: number; records?: Record<string, unknown>[]; error?: string }) => {
    const p = reader.pending.get(m.id);
    reader.pending.delete(m.id);
    // Held open only while a file is being read.
    if (reader.pending.size === 0) worker.unref();
    if (m.records) p?.resolve(m.records);
    else p?.reject(m.error ?? 'unknown error');
  });
  const stop = (why: string) => {
    if (parquetReader === reader) parquetReader = undefined;
    for (const p of reader.pending.values()) p.reject(why);
    reader.pending.clear();
  };
  worker.on('error', (e) => stop(e.message));
  worker.on('exit', (code) => stop(`its reader stopped (exit code ${code})`));
  parquetReader = reader;
  return reader;
}

/** How long a file may take to read (a damaged one can leave the reader waiting forever). */
function parquetReadTimeoutMs(bytes: number): number {
  return 5_000 + bytes / 5_000;
}

async function readParquetRows<T>(file: string, validate: RowValidator<T>): Promise<T[]> {
  const reader = readerThread();
  const id = reader.next++;
  const limit = parquetReadTimeoutMs(fs.statSync(file).size);
  const records = await new Promise<Record<string, unknown>[]>((resolve, reject) => {
    const timer = setTimeout(() => {
      // The reader is stuck on this file: end it (its other requests fail too) and start afresh next time.
      reader.pending.get(id)?.reject(`reading it did not finish in ${(limit / 1000).toFixed(0)} s`);
      reader.pending.delete(id);
      if (parquetReader === reader) parquetReader = undefined;
      void reader.worker.terminate();
    }, limit);
    const settle = <T>(f: (v: T) => void) => (v: T) => {
      clearTimeout(timer);
      f(v);
    };
    reader.pending.set(id, { resolve: settle(resolve), reject: settle((why: string) => reject(new InputError(`${file}: not a readable parquet file (${why})`))) });
    reader.worker.ref();
    reader.worker.postMessage({ id, file: path.resolve(file) });
  });
  return records.map((record, i) => validate(toJsonValue(record), `${file} row ${i + 1}`));
}

/**
 * Reads every row of a .jsonl (one JSON object a line, blank lines skipped) or .parquet file, each
 * checked by `validate` (RL rows by default). Errors name the file and the 1-based line (jsonl) or
 * row (parquet).
 */
export async function readRows(file: string): Promise<DataRow[]>;
export async function readRows<T>(file: string, validate: RowValidator<T>): Promise<T[]>;
export async function readRows(file: string, validate: RowValidator<unknown> = validateRow): Promise<unknown[]> {
  const extension = path.extname(file).toLowerCase();
  if (!(DATA_FILE_EXTENSIONS as readonly string[]).includes(extension)) {
    throw new InputError(`${file}: unsupported data file type '${extension || '(none)'}' (use ${DATA_FILE_EXTENSIONS.join(' or ')})`);
  }
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch {
    throw new InputError(`${file}: file not found`);
  }
  if (!stat.isFile()) throw new InputError(`${file}: not a file`);
  return extension === '.jsonl' ? readJsonlRows(file, validate) : readParquetRows(file, validate);
}

/** Writes rows as jsonl through a temporary file in the same directory, so readers never see half a file. */
export function writeRowsJsonl(file: string, rows: DataRow[]): void {
  const dir = path.dirname(file);
  fs.mkdirSync(dir, { recursive: true });
  const temp = path.join(dir, `.${path.basename(file)}.${process.pid}.${Date.now()}.tmp`);
  try {
    fs.writeFileSync(temp, rows.map((row) => JSON.stringify(row) + '\n').join(''));
    fs.renameSync(temp, file);
  } catch (e) {
    fs.rmSync(temp, { force: true });
    throw e;
  }
}

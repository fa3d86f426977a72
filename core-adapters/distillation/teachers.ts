// On-policy distillation's teachers (verl's distillation.teacher_models): each scores the student's
// sampled sequences, prompt and response as one context at T = 1, and the scores land in the batch
// for the actor's distillation loss (algorithms/distillation.ts). A teacher is a vLLM-dialect server
// (flowrl serve, vLLM: prompt_logprobs on /v1/completions) or a model loaded in this process.
// Several teachers split the rows by distillation.teacher_key. A teacher must tokenize as the
// student does: it is given the student's ids (verl checks nothing; here a mismatch is refused).
import path from 'node:path';
import type { Batch } from '../batch.js';
import type { Config } from '../config/load.js';
import { TEACHER_ENGINES } from '../config/choices.js';
import { InputError } from '../errors.js';
import { loadModel } from '../model/checkpoint.js';
import { promptTopLogProbs, responseLogProbs } from '../model/logprobs.js';
import type { CausalLM } from '../model/causal-lm.js';
import { TextTokenizer } from '../model/tokenizer.js';
import { usesTopK } from '../algorithms/distillation.js';
import { SglangClient, VllmClient, type PromptPositionScores } from '../rollout/clients.js';

/** The batch's teacher scores: [B, R] at the sampled tokens; with top-k, [B, R, k] ids and log-probs. */
export const TEACHER_LOG_PROBS = 'teacher_log_probs';
export const TEACHER_TOPK_IDS = 'teacher_topk_ids';
export const TEACHER_TOPK_LOG_PROBS = 'teacher_topk_log_probs';

/** One sequence for a teacher: prompt and response ids as the student saw them. */
interface TeacherSequence {
  prompt: number[];
  response: number[];
}

/** A teacher's scores of one response: per token its log-prob and, with k, the k most likely there. */
type ResponseScores = PromptPositionScores[];

interface Teacher {
  readonly name: string;
  score(sequences: TeacherSequence[], k: number): Promise<ResponseScores[]>;
  dispose(): void;
}

/** A teacher's keys as this project reads them (verl's, less the GPU placement ones; urls and the rest for servers). */
interface TeacherSettings {
  name: string;
  key: string | null;
  modelPath: string;
  engine: (typeof TEACHER_ENGINES)[number];
  urls: string[];
  apiKey?: string;
  timeoutS: number;
  maxInflight: number;
}

const TEACHER_KEYS = ['key', 'model_path', 'inference', 'num_replicas'];
const INFERENCE_KEYS = ['name', 'urls', 'api_key', 'timeout_s', 'max_inflight'];

/** distillation.teacher_models, checked key by key (it is a free-form map of names). */
function teacherSettings(config: Config): TeacherSettings[] {
  const where = 'distillation.teacher_models';
  const models = config.distillation.teacher_models as Record<string, unknown>;
  const names = Object.keys(models ?? {});
  if (!names.length) throw new InputError(`distillation.enabled is true but ${where} is empty: name a teacher, e.g. ${where}.teacher.model_path=DIR with inference.name vllm and inference.urls, or local`);
  return names.map((name) => {
    const at = `${where}.${name}`;
    const entry = models[name];
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) throw new InputError(`${at} must be a mapping of ${TEACHER_KEYS.join(', ')}`);
    const t = entry as Record<string, unknown>;
    for (const k of Object.keys(t)) if (!TEACHER_KEYS.includes(k)) throw new InputError(`${at}.${k} is not a teacher key (${TEACHER_KEYS.join(', ')})`);
    const inference = (t.inference ?? {}) as Record<string, unknown>;
    if (typeof inference !== 'object' || Array.isArray(inference)) throw new InputError(`${at}.inference must be a mapping of ${INFERENCE_KEYS.join(', ')}`);
    for (const k of Object.keys(inference)) if (!INFERENCE_KEYS.includes(k)) throw new InputError(`${at}.inference.${k} is not read here (${INFERENCE_KEYS.join(', ')}; the teacher server's own flags place and size it)`);
    if (typeof t.model_path !== 'string' || !t.model_path) throw new InputError(`${at}.model_path is required: the teacher's model directory (its tokenizer is checked against the student's; inference.name local loads it)`);
    if (t.key !== undefined && t.key !== null && typeof t.key !== 'string') throw new InputError(`${at}.key must be a string (the ${config.distillation.teacher_key} value its rows carry)`);
    const engine = inference.name ?? 'vllm';
    if (typeof engine !== 'string' || !(TEACHER_ENGINES as readonly string[]).includes(engine)) {
      throw new InputError(`${at}.inference.name must be one of ${TEACHER_ENGINES.join(', ')}; got ${JSON.stringify(engine)}`);
    }
    const urls = ([] as unknown[]).concat(inference.urls ?? []);
    if (engine !== 'local' && (!urls.length || urls.some((u) => typeof u !== 'string' || !/^https?:\/\//.test(u)))) throw new InputError(`${at}.inference.urls must list the teacher servers' base URLs (http://host:port) for inference.name ${engine}`);
    const count = (k: string, fallback: number) => {
      const v = inference[k] ?? fallback;
      if (typeof v !== 'number' || !(v > 0)) throw new InputError(`${at}.inference.${k} must be a number > 0; got ${JSON.stringify(v)}`);
      return v;
    };
    const apiKey = inference.api_key ?? undefined;
    if (apiKey !== undefined && typeof apiKey !== 'string') throw new InputError(`${at}.inference.api_key must be a string`);
    return { name, key: (t.key as string | null | undefined) ?? null, modelPath: t.model_path, engine: engine as TeacherSettings['engine'], urls: urls as string[], apiKey, timeoutS: count('timeout_s', 600), maxInflight: Math.floor(count('max_inflight', 16)) };
  });
}

/** The id each token string has, added tokens included: what must agree for a teacher to read the student's ids. */
function vocabulary(tokenizer: TextTokenizer): Map<string, number> {
  const json = tokenizer.tokenizerJson as { model?: { vocab?: unknown }; added_tokens?: { id: number; content: string }[] };
  const out = new Map<string, number>();
  const vocab = json.model?.vocab;
  // BPE and WordPiece map token -> id; Unigram lists [piece, score] in id order.
  if (Array.isArray(vocab)) vocab.forEach((entry, id) => out.set(String((entry as unknown[])[0]), id));
  else if (vocab && typeof vocab === 'object') for (const [token, id] of Object.entries(vocab)) out.set(token, id as number);
  for (const added of json.added_tokens ?? []) out.set(added.content, added.id);
  return out;
}

/** Refuses a teacher whose tokenizer maps any token to another id than the student's, naming both and the first difference. */
export function checkSameTokenizer(student: TextTokenizer, studentDir: string, teacher: TextTokenizer, teacherDir: string, where: string): void {
  const a = vocabulary(student);
  const b = vocabulary(teacher);
  let difference: string | undefined;
  if (a.size !== b.size) difference = `${a.size} tokens vs ${b.size}`;
  else {
    for (const [token, id] of a) {
      if (b.get(token) !== id) {
        difference = `token ${JSON.stringify(token)} is id ${id} for the student and ${b.has(token) ? `id ${b.get(token)}` : 'absent'} for the teacher`;
        break;
      }
    }
  }
  if (difference) {
    throw new InputError(`${where}: the teacher's tokenizer (${teacherDir}) is not the student's (${studentDir}): ${difference}. A teacher scores the student's token ids, so both must share one vocabulary`);
  }
}

/** Runs `work` over `items` with at most `limit` at once, results in order. */
async function mapLimited<T, R>(items: T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await work(items[i]);
    }
  });
  await Promise.all(lanes);
  return out;
}

/** A teacher behind a server's routes (vLLM's prompt_logprobs, SGLang's input log-probs): each sequence one request, spread over the servers. */
class ServerTeacher implements Teacher {
  private readonly clients: (VllmClient | SglangClient)[];
  constructor(private readonly settings: TeacherSettings) {
    const Client = settings.engine === 'sglang' ? SglangClient : VllmClient;
    this.clients = settings.urls.map((url) => new Client(url.replace(/\/+$/, ''), { timeoutMs: settings.timeoutS * 1000, apiKey: settings.apiKey }));
  }

  get name(): string {
    return this.settings.name;
  }

  async score(sequences: TeacherSequence[], k: number): Promise<ResponseScores[]> {
    let turn = 0;
    const lanes = this.settings.maxInflight * this.clients.length;
    return await mapLimited(sequences, lanes, async ({ prompt, response }) => {
      const client = this.clients[turn++ % this.clients.length];
      const scores = await client.promptScores([...prompt, ...response], k);
      // Position i of the answer scores id i + 1: the response's tokens are the last ones.
      return scores.slice(prompt.length - 1);
    });
  }

  dispose(): void {}
}

/** A teacher loaded in this process from model_path (small teachers, tests). */
class LocalTeacher implements Teacher {
  private readonly model: CausalLM;
  constructor(private readonly settings: TeacherSettings) {
    this.model = loadModel(settings.modelPath);
  }

  get name(): string {
    return this.settings.name;
  }

  async score(sequences: TeacherSequence[], k: number): Promise<ResponseScores[]> {
    if (!k) {
      const lps = await responseLogProbs(this.model, sequences.map((s) => s.prompt), sequences.map((s) => s.response), 1);
      return lps.map((row) => row.map((logProb) => ({ logProb, ids: [], logProbs: [] })));
    }
    const out: ResponseScores[] = [];
    for (const { prompt, response } of sequences) out.push((await promptTopLogProbs(this.model, [...prompt, ...response], k)).slice(prompt.length - 1));
    return out;
  }

  dispose(): void {
    this.model.dispose();
  }
}

/** The run's teachers, routing rows to them and writing their scores into batches. */
export class Teachers {
  private constructor(
    private readonly teachers: Teacher[],
    private readonly keys: (string | null)[],
    private readonly routeKey: string,
    private readonly topk: number,
  ) {}

  /**
   * The teachers distillation names, each checked: keys, a tokenizer equal to the student's (whose
   * directory is `studentDir`), distinct routing keys with several. Undefined when distillation is off.
   */
  static fromConfig(config: Config, student: TextTokenizer | undefined, studentDir: string): Teachers | undefined {
    const d = config.distillation;
    if (!d.enabled) return undefined;
    const l = d.distillation_loss;
    if (!l.use_policy_gradient && (l.loss_mode === 'k1' || l.loss_mode === 'kl')) {
      throw new InputError(`distillation.distillation_loss.loss_mode ${l.loss_mode} needs use_policy_gradient true: backpropagated directly, k1's gradient does not depend on the teacher (verl refuses it too); use k3 or forward_kl_topk, or set use_policy_gradient=true`);
    }
    if (l.use_policy_gradient && usesTopK(l.loss_mode)) {
      // As verl warns: the PG term moves only the sampled token's log-prob.
      process.stderr.write('[flowrl] warning: distillation forward_kl_topk with use_policy_gradient uses the divergence only as each sampled token\'s advantage; the top-k signal (how the other tokens should move) is largely unused. Supervised (use_policy_gradient false) is what it is for\n');
    }
    const settings = teacherSettings(config);
    if (settings.length > 1) {
      const seen = new Map<string, string>();
      for (const s of settings) {
        if (s.key === null) throw new InputError(`distillation.teacher_models.${s.name}.key is required with several teachers: the ${d.teacher_key} value of the rows it scores`);
        if (seen.has(s.key)) throw new InputError(`distillation.teacher_models.${s.name}.key ${JSON.stringify(s.key)} is also ${seen.get(s.key)}'s: each teacher needs its own`);
        seen.set(s.key, s.name);
      }
    }
    const studentTokenizer = student ?? TextTokenizer.load(studentDir);
    for (const s of settings) checkSameTokenizer(studentTokenizer, studentDir, TextTokenizer.load(s.modelPath), path.resolve(s.modelPath), `distillation.teacher_models.${s.name}`);
    const teachers = settings.map((s) => (s.engine === 'local' ? new LocalTeacher(s) : new ServerTeacher(s)));
    return new Teachers(teachers, settings.length > 1 ? settings.map((s) => s.key) : [null], d.teacher_key, usesTopK(l.loss_mode) ? l.topk : 0);
  }

  /** Which teacher scores each row: the only one, or the one whose key is the row's teacher_key value. */
  private route(batch: Batch): number[] {
    if (this.teachers.length === 1) return Array.from({ length: batch.size }, () => 0);
    const values = batch.has(this.routeKey) ? batch.column<unknown>(this.routeKey) : batch.column<Record<string, unknown> | null>('extra_info').map((e) => e?.[this.routeKey]);
    return values.map((value, row) => {
      const i = this.keys.indexOf(String(value));
      if (i < 0) throw new InputError(`distillation.teacher_key ${this.routeKey}: row ${row} has ${JSON.stringify(value)}, which no teacher's key names (${this.keys.map((k) => JSON.stringify(k)).join(', ')})`);
      return i;
    });
  }

  /** Scores the batch's sequences with their teachers and sets the teacher columns the actor's loss reads. */
  async score(batch: Batch): Promise<void> {
    const ids = batch.tensor('input_ids');
    const attention = batch.tensor('attention_mask').data;
    const R = batch.tensor('responses').shape[1];
    const L = ids.shape[1];
    const P = L - R;
    const B = batch.size;
    // Left-padded prompts, right-padded responses: the attended ids are the sequence.
    const sequences: TeacherSequence[] = Array.from({ length: B }, (_, b) => {
      const prompt: number[] = [];
      const response: number[] = [];
      for (let t = 0; t < L; t++) if (attention[b * L + t]) (t < P ? prompt : response).push(ids.data[b * L + t]);
      return { prompt, response };
    });
    const owner = this.route(batch);
    const scores = new Array<ResponseScores>(B);
    await Promise.all(
      this.teachers.map(async (teacher, i) => {
        const rows = owner.flatMap((o, b) => (o === i ? [b] : []));
        if (!rows.length) return;
        const got = await teacher.score(rows.map((b) => sequences[b]), this.topk);
        rows.forEach((b, j) => (scores[b] = got[j]));
      }),
    );
    const k = this.topk;
    const logProbs = new Float32Array(B * R);
    const topIds = new Int32Array(B * R * k);
    const topLogProbs = new Float32Array(B * R * k);
    for (let b = 0; b < B; b++) {
      const row = scores[b];
      if (row.length !== sequences[b].response.length) throw new Error(`distillation: the teacher scored ${row.length} of row ${b}'s ${sequences[b].response.length} response tokens`);
      row.forEach((s, t) => {
        logProbs[b * R + t] = s.logProb;
        for (let j = 0; j < k; j++) {
          topIds[(b * R + t) * k + j] = s.ids[j];
          topLogProbs[(b * R + t) * k + j] = s.logProbs[j];
        }
      });
    }
    batch.set(TEACHER_LOG_PROBS, { shape: [B, R], data: logProbs });
    if (k) {
      batch.set(TEACHER_TOPK_IDS, { shape: [B, R, k], data: topIds });
      batch.set(TEACHER_TOPK_LOG_PROBS, { shape: [B, R, k], data: topLogProbs });
    }
  }

  dispose(): void {
    for (const teacher of this.teachers) teacher.dispose();
  }
}

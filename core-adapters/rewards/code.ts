// Code rewards as verl v0.9.0 scores them (verl/utils/reward_score/prime_code, continuous): the
// response's program runs against the row's tests, each in its own sandbox (./sandbox.ts) or server
// request, inside a harness (./python-harness.ts) that reports on a channel the program cannot write
// to by accident. A row's reward_model.ground_truth is a JSON string or an object in one of three styles:
//   standard input: {"inputs": [stdin, ...], "outputs": [expected stdout, ...]}
//   call-based:     {"fn_name": f, "inputs": [args as JSON values, one per line], "outputs": [JSON result]}
//                   (a global f, or a method of class Solution when the program defines one)
//   assert:         {"assert_case": ["assert f(1) == 2", ...]}: each appended to the program, passing
//                   when every statement ran to the end
import { createHash, randomBytes } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import { InputError, ScorerUnavailable, ScoringError } from '../errors.js';
import { isTree } from '../config/load.js';
import { threadEntrySource } from '../thread-entry.js';
import { harnessInput, pythonHarness, readHarnessRecord, type Execution, type HarnessMode, type HarnessTest, type PyValue, type ReportChannel } from './python-harness.js';
import type { ProgramSandbox, SandboxLimits } from './sandbox.js';
import { judgeRunHere, pyText, type RunToJudge } from './judge.js';
import type { ScoreResult } from './types.js';

/** The data_source values verl v0.9.0's default_compute_score scores as code. */
export const CODE_SOURCES = ['codecontests', 'apps', 'codeforces', 'taco'] as const;

export interface CodeTests {
  /** stdin per test (standard input), or the call's arguments as JSON lines (call-based); '' for assert tests. */
  inputs: string[];
  /** Expected stdout (standard input) or JSON result (call-based); null for assert tests. */
  outputs: (string | null)[];
  fnName?: string;
  /** Statements appended to the program, one test each. */
  asserts?: string[];
}

const isStringList = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string');

/**
 * JSON as Python's json.loads reads it, which also takes NaN, Infinity and -Infinity: those words
 * outside strings are read as null here (only whether the text parses matters). Throws as JSON.parse.
 */
function parsePythonJson(text: string): unknown {
  let out = '';
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      out += c;
      if (c === '\\') out += text[++i] ?? '';
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    const word = /^(?:-?Infinity|NaN)/.exec(text.slice(i, i + 9))?.[0];
    if (word) {
      out += 'null';
      i += word.length - 1;
      continue;
    }
    out += c;
  }
  return JSON.parse(out);
}

/** Reads a row's ground truth; throws an InputError saying what is wrong (the caller names the row). */
export function parseCodeTests(groundTruth: unknown): CodeTests {
  let spec: unknown = groundTruth;
  if (typeof spec === 'string') {
    try {
      spec = JSON.parse(spec);
    } catch (e) {
      throw new InputError(`reward_model.ground_truth is not JSON test cases (${(e as Error).message})`);
    }
  }
  if (!isTree(spec)) throw new InputError('reward_model.ground_truth must be an object (or its JSON) with inputs and outputs, or assert_case');
  if (spec.assert_case !== undefined) {
    if (!isStringList(spec.assert_case) || spec.assert_case.length === 0) throw new InputError('reward_model.ground_truth.assert_case must be a non-empty list of strings');
    return { inputs: spec.assert_case.map(() => ''), outputs: spec.assert_case.map(() => null), asserts: spec.assert_case };
  }
  const { inputs, outputs, fn_name: fnName } = spec;
  if (!isStringList(inputs) || inputs.length === 0) throw new InputError('reward_model.ground_truth.inputs must be a non-empty list of strings');
  if (!isStringList(outputs)) throw new InputError('reward_model.ground_truth.outputs must be a list of strings');
  if (inputs.length !== outputs.length) throw new InputError(`reward_model.ground_truth has ${inputs.length} inputs but ${outputs.length} outputs`);
  if (fnName === undefined || fnName === null) return { inputs, outputs };
  if (typeof fnName !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(fnName)) throw new InputError('reward_model.ground_truth.fn_name must be a Python identifier');
  // Call-based inputs and outputs are JSON: malformed ones are the row's fault, found before any run.
  inputs.forEach((input, i) => {
    for (const line of input.split('\n')) {
      try {
        parsePythonJson(line);
      } catch {
        throw new InputError(`reward_model.ground_truth.inputs[${i}]: each line must be one JSON argument (got ${JSON.stringify(line.slice(0, 60))})`);
      }
    }
  });
  outputs.forEach((output, i) => {
    try {
      parsePythonJson(output);
    } catch {
      throw new InputError(`reward_model.ground_truth.outputs[${i}] must be JSON (got ${JSON.stringify(output.slice(0, 60))})`);
    }
  });
  return { inputs, outputs, fnName };
}

/** The program in a response: after the last ```python, up to the next fence (prime_code's rule); else the whole response. */
export function extractCode(response: string): string {
  return response.split('```python').at(-1)!.split('```')[0];
}

/** One test program's outcome. */
export interface ProgramRun {
  /** The program ran to its end: exit code 0 (and, with a harness, its record written). */
  finished: boolean;
  stdout: string;
  /** Why it did not finish (timeout, output_limit, runtime_error, ...). */
  status: string;
  /** What a harness reported on its private channel; undefined when it wrote nothing. */
  report?: string;
}

/** Runs one Python program with stdin: the local sandbox or a SandboxFusion server. */
export interface CodeRunner {
  /** How a harness reports to the host through this runner. */
  readonly channel: ReportChannel;
  /** The most bytes of output a program may write (a harness that captures output checks it); unset or 0: none of its own. */
  readonly outputBytes?: number;
  run(code: string, stdin: string): Promise<ProgramRun>;
}

/** The local bubblewrap sandbox as a runner: harness records come on its private descriptors. */
export class SandboxRunner implements CodeRunner {
  readonly channel: ReportChannel = { kind: 'descriptors' };

  constructor(readonly sandbox: ProgramSandbox) {}

  get outputBytes(): number {
    return this.sandbox.limits.outputBytes;
  }

  async run(code: string, stdin: string): Promise<ProgramRun> {
    const result = await this.sandbox.run('python', code, stdin, { report: true });
    if (result.status === 'sandbox_error') throw new ScorerUnavailable(`the code sandbox failed to start: ${result.stderr.trim()}`);
    const finished = result.status === 'exited' && result.exitCode === 0;
    return { finished, stdout: result.stdout, status: finished ? 'finished' : result.status === 'exited' ? 'runtime_error' : result.status, report: result.report };
  }
}

/** A run whose stdout and report together are longer than this (UTF-16 units) is not kept for reuse. */
const REUSE_MAX_STDOUT = 64 * 1024;

/**
 * Runs each distinct (program, input) once: repeats among the last `capacity` runs, in flight or
 * done, share the first run's result. A group of samples often repeats answers, and validation
 * at low temperature more so; the result is the same for any program whose outcome is not random.
 * Not kept: a run that throws (sandbox failure), one that timed out (the machine may have been
 * busy) and one with long output. Kept runs are bounded in bytes too (`maxBytes`, 64 MiB): their
 * stdout, report and key at two bytes a UTF-16 unit, the least recently used evicted first.
 */
export class ReusedRuns implements CodeRunner {
  get channel(): ReportChannel {
    return this.runner.channel;
  }

  get outputBytes(): number | undefined {
    return this.runner.outputBytes;
  }

  /** 4096 runs of 64 KiB would be 512 MiB (twice that as UTF-16): the default bound on bytes held. */
  static readonly MAX_BYTES = 64 * 1024 * 1024;

  /** Each kept run and the bytes it holds (its key until it finishes, then its output too). */
  private readonly runs = new Map<string, { run: Promise<ProgramRun>; bytes: number }>();
  private held = 0;

  constructor(
    private readonly runner: CodeRunner,
    private readonly capacity: number,
    private readonly maxBytes = ReusedRuns.MAX_BYTES,
  ) {}

  run(code: string, stdin: string): Promise<ProgramRun> {
    const key = createHash('sha256').update(code).update('\u0000').update(stdin).digest('base64');
    const known = this.runs.get(key);
    if (known) {
      // Most recently used last, so the oldest entry is the first one evicted.
      this.runs.delete(key);
      this.runs.set(key, known);
      return known.run;
    }
    const run = this.runner.run(code, stdin);
    const entry = { run, bytes: 2 * key.length };
    this.runs.set(key, entry);
    this.held += entry.bytes;
    // Only this run's own entry goes: a newer one under the same key stays.
    const forget = () => this.runs.get(key) === entry && this.drop(key);
    run.then((result) => {
      // A harness's report is held too.
      const size = result.stdout.length + (result.report?.length ?? 0);
      if (result.status === 'timeout' || size > REUSE_MAX_STDOUT) return void forget();
      if (this.runs.get(key) !== entry) return;
      entry.bytes += 2 * size;
      this.held += 2 * size;
      this.evict();
    }, forget);
    this.evict();
    return run;
  }

  private drop(key: string): void {
    this.held -= this.runs.get(key)!.bytes;
    this.runs.delete(key);
  }

  /** Drops the least recently used runs until both the count and the bytes fit. */
  private evict(): void {
    while (this.runs.size > 0 && (this.runs.size > this.capacity || this.held > this.maxBytes)) this.drop(this.runs.keys().next().value!);
  }
}

export interface CodeSettings {
  score: CodeScoreMode;
  execution: Execution;
  timeout_s: number;
  wall_factor: number;
  memory_mb: number;
  processes: number;
  output_bytes: number;
  concurrency: number | null;
  reuse_runs: number;
}

/** The local sandbox's limits for the code settings. */
export function codeSandboxLimits(settings: CodeSettings): Partial<SandboxLimits> {
  return { cpuSeconds: Math.max(1, Math.ceil(settings.timeout_s)), wallSeconds: settings.timeout_s * settings.wall_factor, memoryMb: settings.memory_mb, processes: settings.processes, outputBytes: settings.output_bytes };
}

/**
 * How a row's test results become its score. prime_code (verl's default, continuous): 1 when every
 * test passes, else the share passed of the first 10 (a call-based row's rerun without its fn_name,
 * as standard-input programs, as verl does). fraction: the share of all tests passed. all: 1 when
 * every test passes, else 0.
 */
export type CodeScoreMode = 'prime_code' | 'fraction' | 'all';

/**
 * Runs tests through the harness, in one run when the harness reads them (all of a row for
 * prime_code's first pass, or one), else one; says which passed (none when the run did not end).
 */
async function runTests(runner: CodeRunner, program: string, mode: HarnessMode, execution: Execution, tests: HarnessTest[]): Promise<boolean[]> {
  const run = await runner.run(pythonHarness(program, mode, execution, runner.channel, runner.outputBytes), harnessInput(mode, execution, tests));
  return judgeRun({ finished: run.finished, report: run.report, stdout: run.stdout, mode, execution, expected: tests.map((t) => t.expected) });
}

/**
 * Runs judged here up to this many UTF-16 units of report, stdout and expected values together
 * (about 20 ms on a 2-core machine); larger ones go to the judging thread.
 */
export const JUDGE_HERE_MAX = 128 * 1024;

function runSize(run: RunToJudge): number {
  return (run.report?.length ?? 0) + run.stdout.length + run.expected.reduce((n, e) => n + (e?.length ?? 0), 0) + (run.mode.kind === 'expression' ? JSON.stringify(run.mode.expected).length : 0);
}

type JudgeReply = { id: number; passed: boolean[] } | { id: number; error: { kind?: string; message: string } };

/** One thread for all large runs, started on first use; it does not keep the process alive. */
class JudgeThread {
  private worker?: Worker;
  private next = 0;
  private readonly pending = new Map<number, { resolve: (passed: boolean[]) => void; reject: (e: Error) => void }>();

  judge(run: RunToJudge): Promise<boolean[]> {
    const worker = this.start();
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (this.pending.size === 1) worker.ref();
      worker.postMessage({ id, run });
    });
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(threadEntrySource(new URL('./judge-thread.js', import.meta.url)), { eval: true });
    worker.unref();
    worker.on('message', (reply: JudgeReply) => {
      const waiting = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      if (this.pending.size === 0) worker.unref();
      if (!waiting) return;
      if ('passed' in reply) waiting.resolve(reply.passed);
      else waiting.reject(reply.error.kind ? new ScoringError(reply.error.kind, reply.error.message) : new Error(`judging a run: ${reply.error.message}`));
    });
    // A thread that dies (out of memory on a huge record) fails what it held; the next run starts another.
    const fail = (e: Error) => {
      this.worker = undefined;
      for (const waiting of this.pending.values()) waiting.reject(new ScoringError('judge_failed', `the judging thread stopped: ${e.message}`));
      this.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`exit code ${code}`)));
    this.worker = worker;
    return worker;
  }
}

const judgeThread = new JudgeThread();

/** Which tests of a run passed: judged here when small, on the judging thread when large. */
export async function judgeRun(run: RunToJudge): Promise<boolean[]> {
  return runSize(run) <= JUDGE_HERE_MAX ? judgeRunHere(run) : judgeThread.judge(run);
}

/**
 * Each `assert EXPR == LITERAL` as EXPR's source and the literal's value, read by one run of the
 * harness without any program (so the expected values never share a process with one; a runner
 * that reuses runs makes it one run per row). Undefined for a statement of another form, or all
 * of them when that run fails: those asserts run in the program's process, as verl runs them.
 */
async function prepareAsserts(runner: CodeRunner, statements: string[]): Promise<({ expression: string; expected: PyValue } | undefined)[]> {
  const mode: HarnessMode = { kind: 'prepare' };
  const run = await runner.run(pythonHarness('', mode, 'program', runner.channel), harnessInput(mode, 'program', statements.map((input) => ({ input, expected: null }))));
  const record = run.finished ? readHarnessRecord(run.report) : undefined;
  return statements.map((_, i) => {
    const pair = record?.results?.[i]?.output;
    const [expression, expected] = pair !== null && typeof pair === 'object' && 't' in pair ? pair.t : [];
    const source = expression === undefined ? undefined : pyText(expression);
    return source === undefined || expected === undefined ? undefined : { expression: source, expected };
  });
}

/**
 * Scores a response against code tests with a runner; a test that cannot run (bad program, timeout)
 * fails. `execution` says how programs run (see python-harness.ts). Under prime_code scoring and
 * execution, as verl: a first pass runs the row's tests in one process (one time limit for all);
 * when any fails, the first 10 run again one by one, a call-based row's as standard-input programs.
 */
export async function scoreCode(runner: CodeRunner, response: string, groundTruth: unknown, mode: CodeScoreMode, execution: Execution = 'prime_code'): Promise<ScoreResult> {
  const parsed = parseCodeTests(groundTruth);
  const program = extractCode(response);
  const tests = parsed.inputs.map((input, i) => ({ input, expected: parsed.outputs[i] }));
  const prepared = parsed.asserts && (await prepareAsserts(runner, parsed.asserts));
  const modeOf = (i: number): HarnessMode => {
    if (parsed.asserts) return prepared?.[i] ? { kind: 'expression', ...prepared[i] } : { kind: 'assert', statement: parsed.asserts[i] };
    return parsed.fnName ? { kind: 'call', fnName: parsed.fnName } : { kind: 'stdin' };
  };
  const oneByOne = (kind: HarnessMode | undefined, count: number) => Promise.all(tests.slice(0, count).map(async (test, i) => (await runTests(runner, program, kind ?? modeOf(i), execution, [test]))[0]));
  const firstPass = mode === 'prime_code' && execution === 'prime_code' && !parsed.asserts;
  const passed = firstPass ? await runTests(runner, program, modeOf(0), execution, tests) : await oneByOne(undefined, tests.length);
  const count = passed.filter(Boolean).length;
  const all = count === passed.length;
  const fraction = count / passed.length;
  let primeCode = 1;
  if (mode === 'prime_code' && !all) {
    // verl reruns the first 10 tests one by one, without fn_name: a call-based row's tests then run
    // as standard-input programs reading the arguments' text.
    const firstTen = firstPass || parsed.fnName ? await oneByOne(parsed.fnName ? { kind: 'stdin' } : undefined, 10) : passed.slice(0, 10);
    primeCode = firstTen.filter(Boolean).length / firstTen.length;
  }
  const score = mode === 'all' ? (all ? 1 : 0) : mode === 'fraction' ? fraction : primeCode;
  return { score, acc: all, passed_fraction: fraction };
}

/**
 * The fields of a SandboxFusion /run_code answer a runner reads (RunCodeResponse in
 * sandbox/server/sandbox_api.py at bytedance/SandboxFusion 53a6341: status Success | Failed |
 * SandboxError; run_result a CommandRunResult whose status is Finished | Error | TimeLimitExceeded).
 */
interface RunCodeResponse {
  status?: string;
  message?: string;
  run_result?: { status?: string; return_code?: number | null; stdout?: string | null; stderr?: string | null } | null;
}

/**
 * verl's SandboxFusion client as a runner: one POST to the run_code URL per test, with verl's fields
 * (compile_timeout and run_timeout both the test timeout, memory_limit_MB, language python, no files).
 * A 504 is retried (3 tries, 1 s then 2 s apart, as verl does); a test passes when the answer's status
 * is Success with run_result Finished and return code 0. Requests at once are capped by max_concurrent.
 */
export class SandboxFusionRunner implements CodeRunner {
  /** A server gives no private descriptors: the harness's record follows this marker on stderr (one per process, so runs stay reusable). */
  readonly channel = { kind: 'stderr', marker: `flowrl-report-${randomBytes(16).toString('hex')}` } as const;
  /** The server limits output itself. */
  readonly outputBytes = 0;
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(
    readonly url: string,
    readonly options: { timeoutS: number; memoryLimitMb: number; maxConcurrent: number; retryDelayMs?: number },
  ) {}

  async run(code: string, stdin: string): Promise<ProgramRun> {
    if (this.running >= this.options.maxConcurrent) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.running++;
    try {
      return await this.request(code, stdin);
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }

  private async request(code: string, stdin: string): Promise<ProgramRun> {
    const { timeoutS, memoryLimitMb } = this.options;
    const body = JSON.stringify({ compile_timeout: timeoutS, run_timeout: timeoutS, code, stdin, memory_limit_MB: memoryLimitMb, language: 'python', files: {}, fetch_files: [] });
    const delay = this.options.retryDelayMs ?? 1000;
    let last = '';
    for (let attempt = 0; attempt < 3; attempt++) {
      let response: Response;
      try {
        response = await fetch(this.url, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body, signal: AbortSignal.timeout((2 * timeoutS + 10) * 1000) });
      } catch (e) {
        throw new ScorerUnavailable(`SandboxFusion at ${this.url}: ${(e as Error).message}`);
      }
      if (response.status === 504) {
        last = 'gateway timeout (504)';
        await new Promise((resolve) => setTimeout(resolve, delay * 2 ** attempt));
        continue;
      }
      let text: string;
      try {
        text = await response.text();
      } catch (e) {
        throw new ScorerUnavailable(`SandboxFusion at ${this.url}: ${(e as Error).message}`);
      }
      if (!response.ok) {
        const why = `SandboxFusion at ${this.url} answered ${response.status}: ${text.slice(0, 200)}`;
        // A request refused for what it holds (malformed, too large) is this response's; anything
        // else (a wrong URL, no access, a failing server) is nobody's and stops the run.
        throw [400, 413, 422].includes(response.status) ? new ScoringError('sandbox_refused', why) : new ScorerUnavailable(why);
      }
      let answer: RunCodeResponse;
      try {
        answer = JSON.parse(text) as RunCodeResponse;
      } catch {
        throw new ScorerUnavailable(`SandboxFusion at ${this.url} answered ${response.status} with a body that is not JSON: ${text.slice(0, 200)}`);
      }
      if (answer.status === 'SandboxError') throw new ScorerUnavailable(`SandboxFusion at ${this.url}: sandbox error (${answer.message ?? 'no message'})`);
      const run = answer.run_result;
      const finished = answer.status === 'Success' && run?.status === 'Finished' && run.return_code === 0;
      const status = finished ? 'finished' : run?.status === 'TimeLimitExceeded' ? 'timeout' : run ? 'runtime_error' : 'compile_error';
      const stderr = run?.stderr ?? '';
      const mark = `\n${this.channel.marker}\n`;
      const at = stderr.lastIndexOf(mark);
      return { finished, stdout: run?.stdout ?? '', status, report: at >= 0 ? stderr.slice(at + mark.length) : undefined };
    }
    throw new ScorerUnavailable(`SandboxFusion at ${this.url}: ${last} after 3 tries`);
  }
}

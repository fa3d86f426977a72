// Code rewards as verl v0.7.0 scores them (verl/utils/reward_score: prime_code locally, sandbox_fusion
// through a SandboxFusion server): the response's program runs against the row's tests and scores the
// share passed (or 1/0 for all-or-nothing). A row's reward_model.ground_truth is a JSON string or an
// object in one of verl's three styles:
//   standard input: {"inputs": [stdin, ...], "outputs": [expected stdout, ...]}
//   call-based:     {"fn_name": f, "inputs": [args as JSON values, one per line], "outputs": [JSON result]}
//                   (a global f, or a method of class Solution; a list result may also match the
//                   expected list's first element, as prime_code allows)
//   assert:         {"assert_case": ["assert f(1) == 2", ...]}: each appended to the program, passing
//                   when it exits 0
// Every test runs in its own sandbox (./sandbox.ts) or server request.
import { createHash } from 'node:crypto';
import { InputError } from '../errors.js';
import { isTree } from '../config/load.js';
import { Sandbox, type SandboxLimits } from './sandbox.js';
import type { ScoreResult } from './types.js';

/** The data_source values verl v0.7.0's default_compute_score scores as code. */
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
        JSON.parse(line);
      } catch {
        throw new InputError(`reward_model.ground_truth.inputs[${i}]: each line must be one JSON argument (got ${JSON.stringify(line.slice(0, 60))})`);
      }
    }
  });
  outputs.forEach((output, i) => {
    try {
      JSON.parse(output);
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

const lines = (text: string) => {
  const out = text.split('\n').map((l) => l.trim());
  while (out.length && out.at(-1) === '') out.pop();
  return out;
};
const tokens = (text: string) => text.split(/\s+/).filter(Boolean);

/**
 * Whether a program's stdout matches the expected one, leniently as prime_code's ladder does: line by
 * line with surrounding spaces ignored, then token by token, then as numbers within numpy.allclose's
 * tolerance (|a - b| <= 1e-8 + 1e-5 |b|). prime_code's last rung (tokens as unordered sets) is left out.
 */
export function sameOutput(actual: string, expected: string): boolean {
  const [a, e] = [lines(actual), lines(expected)];
  if (a.length === e.length && a.every((l, i) => l === e[i])) return true;
  const [ta, te] = [tokens(actual), tokens(expected)];
  if (ta.length === te.length && ta.every((t, i) => t === te[i])) return true;
  if (ta.length !== te.length || ta.length === 0) return false;
  const [na, ne] = [ta.map(Number), te.map(Number)];
  return na.every((x, i) => Number.isFinite(x) && Number.isFinite(ne[i]) && Math.abs(x - ne[i]) <= 1e-8 + 1e-5 * Math.abs(ne[i]));
}

/** Deep equality of JSON values (call-based results). */
function sameJson(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => sameJson(x, b[i]));
  if (isTree(a) && isTree(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && sameJson(a[k], b[k]));
  }
  return a === b;
}

/** Whether a call's printed result matches: equal as JSON, or equal to the expected list's first element. */
function sameResult(stdout: string, expected: string): boolean {
  let got: unknown;
  try {
    got = JSON.parse(stdout.trim());
  } catch {
    return false;
  }
  const want: unknown = JSON.parse(expected);
  return sameJson(got, want) || (Array.isArray(want) && want.length > 0 && sameJson(got, want[0]));
}

/** The call-based harness appended to the program: arguments from stdin as JSON lines, the result printed as JSON. */
function callHarness(fnName: string): string {
  return `

import json as _flowrl_json, sys as _flowrl_sys
def _flowrl_call():
    _text = _flowrl_sys.stdin.read()
    _args = [_flowrl_json.loads(_line) for _line in _text.split("\\n")] if _text.strip() else []
    _fn = globals().get(${JSON.stringify(fnName)})
    if _fn is None and "Solution" in globals():
        _fn = getattr(globals()["Solution"](), ${JSON.stringify(fnName)})
    _result = _fn(*_args)
    print(_flowrl_json.dumps(list(_result) if isinstance(_result, tuple) else _result))
_flowrl_call()
`;
}

/** One test program's outcome: passed when it finished with exit code 0 (and, where compared, the right output). */
export interface ProgramRun {
  finished: boolean;
  stdout: string;
  /** Why it did not finish (timeout, output_limit, runtime_error, ...). */
  status: string;
}

/** Runs one Python program with stdin: the local sandbox or a SandboxFusion server. */
export interface CodeRunner {
  run(code: string, stdin: string): Promise<ProgramRun>;
}

/** The local bubblewrap sandbox as a runner. */
export class SandboxRunner implements CodeRunner {
  constructor(readonly sandbox: Sandbox) {}

  async run(code: string, stdin: string): Promise<ProgramRun> {
    const result = await this.sandbox.run('python', code, stdin);
    if (result.status === 'sandbox_error') throw new Error(`the code sandbox failed to start: ${result.stderr.trim()}`);
    const finished = result.status === 'exited' && result.exitCode === 0;
    return { finished, stdout: result.stdout, status: finished ? 'finished' : result.status === 'exited' ? 'runtime_error' : result.status };
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
      // A harness's report is held too (ProgramRun's optional report, where a runner sets one).
      const size = result.stdout.length + ((result as ProgramRun & { report?: string }).report?.length ?? 0);
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
  score: 'fraction' | 'all';
  timeout_s: number;
  memory_mb: number;
  processes: number;
  output_bytes: number;
  concurrency: number | null;
  reuse_runs: number;
}

/** The local sandbox's limits for the code settings. */
export function codeSandboxLimits(settings: CodeSettings): Partial<SandboxLimits> {
  return { cpuSeconds: Math.max(1, Math.ceil(settings.timeout_s)), wallSeconds: settings.timeout_s, memoryMb: settings.memory_mb, processes: settings.processes, outputBytes: settings.output_bytes };
}

/** Scores responses against code tests with a runner; a test that cannot run (bad program, timeout) fails. */
export async function scoreCode(runner: CodeRunner, response: string, groundTruth: unknown, mode: 'fraction' | 'all'): Promise<ScoreResult> {
  const tests = parseCodeTests(groundTruth);
  const program = extractCode(response);
  const passed = await Promise.all(
    tests.inputs.map(async (input, i) => {
      const code = tests.asserts ? `${program}\n\n${tests.asserts[i]}\n` : tests.fnName ? program + callHarness(tests.fnName) : program;
      const run = await runner.run(code, input);
      if (!run.finished) return false;
      const expected = tests.outputs[i];
      if (expected === null) return true;
      return tests.fnName ? sameResult(run.stdout, expected) : sameOutput(run.stdout, expected);
    }),
  );
  const count = passed.filter(Boolean).length;
  const fraction = count / passed.length;
  return { score: mode === 'all' ? (count === passed.length ? 1 : 0) : fraction, acc: count === passed.length, passed_fraction: fraction };
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
        throw new Error(`SandboxFusion at ${this.url}: ${(e as Error).message}`);
      }
      if (response.status === 504) {
        last = 'gateway timeout (504)';
        await new Promise((resolve) => setTimeout(resolve, delay * 2 ** attempt));
        continue;
      }
      if (!response.ok) throw new Error(`SandboxFusion at ${this.url} answered ${response.status}: ${(await response.text()).slice(0, 200)}`);
      const answer = (await response.json()) as RunCodeResponse;
      if (answer.status === 'SandboxError') throw new Error(`SandboxFusion at ${this.url}: sandbox error (${answer.message ?? 'no message'})`);
      const run = answer.run_result;
      const finished = answer.status === 'Success' && run?.status === 'Finished' && run.return_code === 0;
      const status = finished ? 'finished' : run?.status === 'TimeLimitExceeded' ? 'timeout' : run ? 'runtime_error' : 'compile_error';
      return { finished, stdout: run?.stdout ?? '', status };
    }
    throw new Error(`SandboxFusion at ${this.url}: ${last} after 3 tries`);
  }
}

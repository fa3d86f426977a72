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
import { InputError, ScorerUnavailable, ScoringError } from '../errors.js';
import { isTree } from '../config/load.js';
import { harnessInput, pythonHarness, readHarnessRecord, reportsResults, type Execution, type HarnessMode, type HarnessTest, type PyValue, type ReportChannel, type TestRecord } from './python-harness.js';
import { Sandbox, type SandboxLimits } from './sandbox.js';
import { expectedCallResult } from './py-json.js';
import { asciiDigits, isPySpace, pyIsDigit, pySplitLines, pyStrip, stripWhere } from './text.js';
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

const INTEGER = /^[+-]?[0-9]+$/;
const DIGITS = '[0-9](?:_?[0-9])*';
const PY_FLOAT = new RegExp(`^[+-]?(?:(?:${DIGITS}(?:\\.(?:${DIGITS})?)?|\\.${DIGITS})(?:[eE][+-]?${DIGITS})?|inf|infinity|nan)$`, 'i');

// The whitespace float() strips: Python's, less U+001C-U+001F, which it refuses.
const floatStrip = (text: string) => stripWhere(text, (code) => isPySpace(code) && (code < 0x1c || code > 0x1f));

/**
 * Python's float() on a line of output: surrounding whitespace, a sign, digits (of any script) with
 * single underscores, a fraction, an exponent, or inf/infinity/nan in any case. undefined where
 * float() raises (so "0x10" is not 16).
 */
export function pyFloat(text: string): number | undefined {
  const t = asciiDigits(floatStrip(text));
  if (!PY_FLOAT.test(t)) return undefined;
  const plain = t.replaceAll('_', '').toLowerCase().replace('infinity', 'inf');
  if (plain.endsWith('inf')) return plain.startsWith('-') ? -Infinity : Infinity;
  if (plain.endsWith('nan')) return NaN;
  return Number(plain);
}

/** numpy.isclose's rule with its defaults (rtol 1e-5, atol 1e-8), the expected value second. */
const isClose = (a: number, b: number) => (Number.isFinite(a) && Number.isFinite(b) ? Math.abs(a - b) <= 1e-8 + 1e-5 * Math.abs(b) : a === b);

const sameLines = (a: string[], b: string[]) => a.length === b.length && a.every((line, i) => line === b[i]);

/**
 * Whether a program's stdout matches the expected output, by prime_code's ladder (verl v0.9.0,
 * testing_util.run_test): the whole text stripped, or with each line stripped; then the printed
 * lines against the expected lines that are not empty (each stripped), as printed and without
 * empty lines; then, unless every line of both is a plain digit string, each line as one number
 * within numpy.allclose's tolerance. One departure: an expected integer line is matched only by
 * that integer, printed as an integer or as a float of that value (prime_code reads
 * "-1000000000.0" and "-1000000007" as close floats).
 */
export function sameOutput(actual: string, expected: string): boolean {
  const printed = pySplitLines(actual);
  const want = pyStrip(expected);
  if (pyStrip(printed.join('\n')) === want || pyStrip(printed.map(pyStrip).join('\n')) === want) return true;
  const wanted = expected.split('\n').filter((line) => line.length > 0).map(pyStrip);
  if (sameLines(printed, wanted)) return true;
  const nonEmpty = printed.filter((line) => line.length > 0);
  if (sameLines(nonEmpty, wanted)) return true;
  if (nonEmpty.length !== wanted.length || nonEmpty.every((line, i) => pyIsDigit(line) && pyIsDigit(wanted[i]))) return false;
  return nonEmpty.every((line, i) => {
    const [a, b] = [asciiDigits(floatStrip(line)), asciiDigits(floatStrip(wanted[i]))];
    const x = pyFloat(a);
    // An integer answer is that integer: no tolerance, however it is printed.
    if (INTEGER.test(b)) return INTEGER.test(a) ? BigInt(a) === BigInt(b) : x !== undefined && Number.isInteger(x) && BigInt(x) === BigInt(b);
    const y = pyFloat(b);
    return x !== undefined && y !== undefined && isClose(x, y);
  });
}

/** A harness value as a number (bool, int, float), for Python's mixed-type numeric ==; undefined otherwise. */
function numeric(value: PyValue): bigint | number | undefined {
  if (typeof value === 'boolean') return value ? 1n : 0n;
  if (value === null) return undefined;
  if ('i' in value) return BigInt(value.i);
  if ('f' in value) return pyFloat(value.f);
  return undefined;
}

/** Python's == on numbers: ints exactly, an int and a float only when the float is that integer. */
function sameNumber(x: bigint | number, y: bigint | number): boolean {
  if (typeof x === 'bigint' && typeof y === 'bigint') return x === y;
  if (typeof x === 'number' && typeof y === 'number') return x === y;
  const [float, int] = typeof x === 'number' ? [x, y as bigint] : [y as number, x];
  return Number.isInteger(float) && BigInt(float) === int;
}

const items = (v: PyValue, tag: 'l' | 't'): PyValue[] | undefined => (v !== null && typeof v === 'object' && tag in v ? (v as Record<typeof tag, PyValue[]>)[tag] : undefined);

/** The text of a harness str value; undefined for any other value. */
export function pyText(value: PyValue): string | undefined {
  return value !== null && typeof value === 'object' && 's' in value ? value.s : undefined;
}

/** Python's list(x): a tuple's or list's items, a str's characters, a dict's keys; undefined for what is not iterable. */
function pyList(value: PyValue): PyValue | undefined {
  if (value === null || typeof value !== 'object') return undefined;
  if ('t' in value) return { l: value.t };
  if ('l' in value) return value;
  if ('s' in value) return { l: [...value.s].map((c) => ({ s: c })) };
  if ('d' in value) return { l: value.d.map(([key]) => key) };
  return undefined;
}

/** Python's == between two harness values: 1 == 1.0 == True, a list never equals a tuple, dicts by key. */
export function pyEquals(a: PyValue, b: PyValue): boolean {
  const [x, y] = [numeric(a), numeric(b)];
  if (x !== undefined || y !== undefined) return x !== undefined && y !== undefined && sameNumber(x, y);
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return a === b;
  if ('s' in a || 's' in b) return 's' in a && 's' in b && a.s === b.s;
  for (const tag of ['l', 't'] as const) {
    const [p, q] = [items(a, tag), items(b, tag)];
    if (p || q) return p !== undefined && q !== undefined && p.length === q.length && p.every((v, i) => pyEquals(v, q[i]));
  }
  if ('d' in a && 'd' in b) {
    if (a.d.length !== b.d.length) return false;
    // By hashed key, as Python looks keys up: pairwise it was the square of the size. A dict
    // holds each key once; a record that repeats one (1 and 1.0) is no dict.
    const other = new Map(b.d.map(([key, value]) => [hashKey(key), value]));
    if (other.size !== b.d.length || new Set(a.d.map(([key]) => hashKey(key))).size !== a.d.length) return false;
    return a.d.every(([key, value]) => {
      const hash = hashKey(key);
      return hash !== undefined && other.has(hash) && pyEquals(value, other.get(hash)!);
    });
  }
  return false;
}

/**
 * A dict key (str, int, float, bool or None: what records hold) as text that two keys share exactly
 * when Python's == holds between them (1, 1.0 and True alike); undefined for nan, equal to nothing.
 */
function hashKey(key: PyValue): string | undefined {
  const number = numeric(key);
  if (number !== undefined) {
    if (typeof number === 'bigint') return `n${number}`;
    if (Number.isNaN(number)) return undefined;
    return Number.isInteger(number) ? `n${BigInt(number)}` : `f${number}`;
  }
  if (key === null) return 'N';
  return typeof key === 'object' && 's' in key ? `s${key.s}` : undefined;
}

/**
 * Whether a call's result passes, as prime_code decides (the result already serialisable, or the
 * harness reports no output): a tuple is taken as a list; equal to the expected value, or to its
 * first element when that is a non-empty list, or, for a list of tuples, as lists to that first element.
 */
export function sameCallResult(output: PyValue, expected: PyValue): boolean {
  const asList = (v: PyValue): PyValue => {
    const tuple = items(v, 't');
    return tuple ? { l: tuple } : v;
  };
  const result = asList(output);
  if (pyEquals(result, expected)) return true;
  const first = items(expected, 'l')?.[0];
  if (first === undefined) return false;
  if (pyEquals(result, first)) return true;
  // [list(x) for x in output]: list() of each element, failing on one it cannot iterate.
  const elements = items(result, 'l');
  if (elements === undefined || elements.length === 0 || items(elements[0], 't') === undefined) return false;
  const listed = elements.map(pyList);
  return listed.every((x) => x !== undefined) && pyEquals({ l: listed as PyValue[] }, first);
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

  constructor(readonly sandbox: Sandbox) {}

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

/** Whether a test's outcome passes: an assert's left side, a call's result, or standard input's output, matches. */
function resultPasses(result: TestRecord | undefined, mode: HarnessMode, expected: string | null, stdout: string): boolean {
  if (mode.kind === 'expression') return result?.output !== undefined && pyEquals(result.output, mode.expected);
  if (expected === null) return true;
  if (mode.kind === 'call') {
    const want = expectedCallResult(expected);
    return result?.output !== undefined && want !== undefined && sameCallResult(result.output, want);
  }
  // Under prime_code the harness captured the output; a program's output is its stdout.
  const output = result === undefined ? stdout : result.output === undefined ? undefined : pyText(result.output);
  return output !== undefined && sameOutput(output, expected);
}

/**
 * Runs tests through the harness, in one run when the harness reads them (all of a row for
 * prime_code's first pass, or one), else one; says which passed (none when the run did not end).
 */
async function runTests(runner: CodeRunner, program: string, mode: HarnessMode, execution: Execution, tests: HarnessTest[]): Promise<boolean[]> {
  const run = await runner.run(pythonHarness(program, mode, execution, runner.channel, runner.outputBytes), harnessInput(mode, execution, tests));
  // A run killed while its harness wrote may leave half a record: it failed, nothing more.
  const record = run.finished ? readHarnessRecord(run.report) : undefined;
  if (!record?.done) return tests.map(() => false);
  // A standard-input program run as a program has no per-test results: its stdout is its output.
  if (!reportsResults(mode, execution)) return [resultPasses(undefined, mode, tests[0].expected, run.stdout)];
  const passed: boolean[] = [];
  for (const [i, test] of tests.entries()) {
    // The event loop runs between tests: a row's comparisons are not one long block.
    if (i > 0) await new Promise((resolve) => setImmediate(resolve));
    const result = record.results?.[i];
    passed.push(result !== undefined && !result.error && resultPasses(result, mode, test.expected, run.stdout));
  }
  return passed;
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

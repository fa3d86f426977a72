// Judging a run on the host: the harness's record read and each test's outcome compared with its
// expected value (verl's prime_code rules; the expected values never enter the sandbox). Pure and
// synchronous: code.ts's judgeRun sends a run with a large output or report to a thread of its own
// (judge-thread.ts), so no response holds the trainer's event loop for long.
import { readHarnessRecord, reportsResults, type Execution, type HarnessMode, type PyValue, type TestRecord } from './python-harness.js';
import { expectedCallResult } from './py-json.js';
import { asciiDigits, isPySpace, pyIsDigit, pySplitLines, pyStrip, stripWhere } from './text.js';

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
    if (INTEGER.test(b)) return INTEGER.test(a) ? sameIntegerText(a, b) : x !== undefined && Number.isInteger(x) && sameIntegerText(BigInt(x).toString(), b);
    const y = pyFloat(b);
    return x !== undefined && y !== undefined && isClose(x, y);
  });
}

/**
 * Whether two integers written in ASCII digits (a sign allowed) are equal, compared as text: BigInt
 * reads a million-digit line in time that grows faster than its length.
 */
function sameIntegerText(a: string, b: string): boolean {
  const canonical = (text: string) => {
    const negative = text.startsWith('-');
    const digits = text.replace(/^[+-]/, '').replace(/^0+(?=.)/, '');
    return digits === '0' ? '0' : (negative ? '-' : '') + digits;
  };
  return canonical(a) === canonical(b);
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

/** What judging a run needs: the run's outcome and each test's expected value (null: none). */
export interface RunToJudge {
  finished: boolean;
  report?: string;
  stdout: string;
  mode: HarnessMode;
  execution: Execution;
  expected: (string | null)[];
}

/** Which tests of a run passed (none when the run did not end, or its record says it did not finish). Throws ScoringError for a malformed record. */
export function judgeRunHere(run: RunToJudge): boolean[] {
  const record = run.finished ? readHarnessRecord(run.report) : undefined;
  // A run killed while its harness wrote may leave half a record: it failed, nothing more.
  if (!record?.done) return run.expected.map(() => false);
  // A standard-input program run as a program has no per-test results: its stdout is its output.
  if (!reportsResults(run.mode, run.execution)) return [resultPasses(undefined, run.mode, run.expected[0], run.stdout)];
  return run.expected.map((expected, i) => {
    const result = record.results?.[i];
    return result !== undefined && !result.error && resultPasses(result, run.mode, expected, run.stdout);
  });
}

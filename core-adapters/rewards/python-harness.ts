// The Python harness around a response's program for code tests. It reports to the host on a
// private channel, never through the program's stdout:
//   - the local sandbox gives the run a secret on descriptor 4 and a report descriptor 5
//     (sandbox.ts); the harness writes the secret line, then one JSON record, then exits at once;
//   - elsewhere (a SandboxFusion server) the record follows a marker line on stderr.
// A record is written only when the harness itself got to the end: a program that exits early
// (sys.exit before the asserts, os._exit, an atexit hook) or dies leaves none, and fails the test.
//
// Two ways to run a program (reward_model.code.execution):
//   prime_code (verl's): what verl v0.9.0's prime_code/testing_util.run_test does, re-created:
//     its guard first (exit, quit, os.fork, os.kill, subprocess, ctypes, ... disabled), its prelude of
//     star imports before the program in one module; a standard-input program has a last
//     `if __name__ == '__main__':` block unwrapped and every line but imports moved into a function
//     `code()`, which is called with sys.stdin a StringIO of the test input, the module's `stdin`
//     returning that input from read/readline (no newline)/readlines, and print's output captured;
//     the process's own stdin is empty, as a verl worker's is. A call-based program is the module
//     "tmp_sol"; its function (or Solution's method, when the text says "class Solution") is called.
//   program: as a real program: `python3 main.py` with the test input on stdin, or the module
//     imported and the function called; nothing disabled, nothing imported for it.
//
// Assert tests run as programs. "assert EXPR == LITERAL" is first split by a 'prepare' run with no
// program (EXPR's source, the literal's value); the program's run then evaluates EXPR and reports its
// value, and the host compares. An assert of another form runs in the program's process.
//
// Records: {"done": true} for in-process asserts and standard-input tests run as programs (the output
// is the process's stdout); otherwise {"done": true, "results": [...]}, one per test (given on stdin,
// or the one assert's EXPR), each {"output": V} (standard input under prime_code: the captured
// output, a str; call-based: the result; an assert: EXPR's value; prepare: (EXPR's source, the
// literal)) or {"error": "..."}; {"done": false, "error": "..."}
// when the program did not load. Several tests in one run share the loaded module, as prime_code's
// first pass over a row does. V is a Python value with its types kept: null, true/false,
// {"i": "<digits>"}, {"f": "<repr>"}, {"s": "<the str>"}, {"l": [...]}, {"t": [...]},
// {"d": [[k, v], ...]}. Only what json.dumps accepts is encoded (verl serialises a result before
// comparing, so anything else fails there too), and under prime_code a numpy scalar result other
// than a str fails (verl's `is True` check rejects the numpy.bool_ its == gives); subclasses are read as their base
// type, so an overridden __eq__ changes nothing.

import { ScoringError } from '../errors.js';

/**
 * How a test's program is run: reading stdin, as a function called per test, followed by an
 * assert (in its process), or followed by an assert's left side, whose value the host compares
 * with `expected` (the assert's right side, read by a 'prepare' run without the program).
 */
export type HarnessMode = { kind: 'stdin' } | { kind: 'call'; fnName: string } | { kind: 'assert'; statement: string } | { kind: 'expression'; expression: string; expected: PyValue } | { kind: 'prepare' };

/** prime_code: as verl's prime_code runs it (the default); program: as a real program. */
export type Execution = 'prime_code' | 'program';

/** Where the record goes: descriptors 4 and 5 (the local sandbox), or stderr after a marker line. */
export type ReportChannel = { kind: 'descriptors' } | { kind: 'stderr'; marker: string };

/** One test's outcome in a record. */
export interface TestRecord {
  output?: PyValue;
  error?: string;
}

/** A run's record as the harness wrote it. */
export interface HarnessRecord {
  done: boolean;
  results?: TestRecord[];
  error?: string;
}

/** A Python value as the harness encodes it. */
export type PyValue = null | boolean | { i: string } | { f: string } | { s: string } | { l: PyValue[] } | { t: PyValue[] } | { d: [PyValue, PyValue][] };

// prime_code's prelude: every name of each module (in this order), then the modules themselves.
const PRELUDE_MODULES = ['string', 're', 'datetime', 'collections', 'heapq', 'bisect', 'copy', 'math', 'random', 'statistics', 'itertools', 'functools', 'operator', 'io', 'sys', 'json', 'builtins', 'typing'];
const STAR_ONLY = new Set(['builtins', 'typing']);
const PRELUDE = [
  ...PRELUDE_MODULES.map((m) => `from ${m} import *`),
  ...PRELUDE_MODULES.filter((m) => !STAR_ONLY.has(m)).map((m) => `import ${m}`),
  'sys.setrecursionlimit(6*10**5)',
  '',
].join('\n');

// What prime_code's reliability_guard disables before a program runs (set to None, or made
// unimportable). Its shutil.rmtree/move/chown are left alone: importing shutil for every run costs
// more than it is worth when the sandbox's files are read-only anyway.
const GUARDED = {
  builtins: ['exit', 'quit', 'help'],
  os: ['kill', 'system', 'putenv', 'remove', 'removedirs', 'rmdir', 'fchdir', 'setuid', 'fork', 'forkpty', 'killpg', 'rename', 'renames', 'truncate', 'replace', 'unlink', 'fchmod', 'fchown', 'chmod', 'chown', 'chroot', 'lchflags', 'lchmod', 'lchown', 'getcwd', 'chdir'],
  modules: ['ipdb', 'joblib', 'resource', 'psutil', 'tkinter', 'subprocess', 'ctypes'],
};

const HARNESS = String.raw`
def _flowrl_harness(program, mode, argument, execution, channel, prelude, guarded, output_limit):
    import os, sys, builtins, json, io, types
    # Everything used after the program has run is bound now, out of its reach.
    os_write, os_exit, os_read, os_close = os.write, os._exit, os.read, os.close
    isinstance_, type_, id_, range_, getattr_, eval_, len_ = isinstance, type, id, range, getattr, eval, len
    import operator
    index_ = operator.index
    # An assert's value may be an integer of another type (numpy's), as == would take it there.
    integers_as_int = mode == "expression"
    int_repr, float_repr, str_str, str_encode = int.__repr__, float.__repr__, str.__str__, str.encode
    escape = json.encoder.encode_basestring_ascii  # a JSON string literal, ASCII only: lone surrogates survive
    list_get, tuple_get, list_len, tuple_len, dict_items = list.__getitem__, tuple.__getitem__, list.__len__, tuple.__len__, dict.items
    stdout, stderr = sys.stdout, sys.stderr
    if channel == "descriptors":
        secret = b""
        while True:
            chunk = os_read(4, 64)
            if not chunk:
                break
            secret += chunk
        os_close(4)
        head, fd = secret.rstrip(b"\n"), 5
    else:
        head, fd = b"\n" + str_encode(channel, "ascii"), 2

    def encode(value, seen):
        if value is None:
            return "null"
        if value is True or value is False:
            return "true" if value else "false"
        if isinstance_(value, str):
            return '{"s":' + escape(str_str(value)) + "}"
        if isinstance_(value, int):
            return '{"i":"' + int_repr(value) + '"}'
        if isinstance_(value, float):
            return '{"f":"' + float_repr(value) + '"}'
        key = id_(value)
        if key in seen:
            raise ValueError("circular reference")
        seen.add(key)
        try:
            if isinstance_(value, list):
                return '{"l":[' + ",".join([encode(list_get(value, i), seen) for i in range_(list_len(value))]) + "]}"
            if isinstance_(value, tuple):
                return '{"t":[' + ",".join([encode(tuple_get(value, i), seen) for i in range_(tuple_len(value))]) + "]}"
            if isinstance_(value, dict):
                pairs = []
                for k, v in dict_items(value):
                    if not (k is None or isinstance_(k, (str, int, float))):
                        raise TypeError("keys must be str, int, float, bool or None")
                    pairs.append("[" + encode(k, seen) + "," + encode(v, seen) + "]")
                return '{"d":[' + ",".join(pairs) + "]}"
        finally:
            seen.discard(key)
        if integers_as_int:
            try:
                return '{"i":"' + int_repr(index_(value)) + '"}'
            except BaseException:
                pass
        raise TypeError("Object of type " + type_(value).__name__ + " is not JSON serializable")

    def report(fields):
        for out in (stdout, sys.stdout):
            try:
                out.flush()
            except BaseException:
                pass
        data = head + b"\n" + str_encode("{" + ",".join(['"' + k + '":' + v for k, v in fields]) + "}", "utf-8")
        while data:
            data = data[os_write(fd, data):]
        os_exit(0)

    def fail(why):
        try:
            import traceback
            traceback.print_exc(file=stderr)
        except BaseException:
            pass
        report([("done", "false"), ("error", '"' + why + '"')])

    def int_keys(value):
        # As prime_code: a JSON object whose keys all read as integers is taken as {int: value}.
        try:
            return True, {int(k): v for k, v in value.items()}
        except BaseException:
            return False, value

    def guard():
        # As prime_code's reliability_guard, which runs before its prelude binds exit and quit.
        # verl's test module has imported numpy before it, so a program's import finds it loaded
        # (importing it after the guard fails); loaded here only for programs that name it.
        if "numpy" in program:
            try:
                import numpy
            except BaseException:
                pass
        os.environ["OMP_NUM_THREADS"] = "1"
        for module, names in ((builtins, guarded["builtins"]), (os, guarded["os"])):
            for name in names:
                setattr(module, name, None)
        for name in guarded["modules"]:
            sys.modules[name] = None

    def prepare(test):
        # A call's arguments, read as prime_code reads them (the expected result stays on the host).
        args = [json.loads(line) for line in test["input"].split("\n")]
        if args and isinstance(args[0], dict):
            converted, value = int_keys(args[0])
            if converted:
                args = [value]
        return args

    # The tests' inputs come on stdin, read to its end before the program runs.
    tests = json.loads(sys.stdin.read())["tests"] if mode in ("call", "prepare") or (mode == "stdin" and execution == "prime_code") else []
    calls = [prepare(test) for test in tests] if mode == "call" else []
    results = []

    if mode == "prepare":
        # No program: each assert statement "assert EXPR == LITERAL" split into EXPR's source and the
        # literal's value, so the program's run evaluates EXPR and the host compares.
        import ast
        for test in tests:
            try:
                tree = ast.parse(test["input"])
                node = tree.body[0]
                if len(tree.body) != 1 or not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
                    raise ValueError("not an assert of one comparison")
                if len(node.test.ops) != 1 or not isinstance(node.test.ops[0], ast.Eq):
                    raise ValueError("not an equality")
                value = encode(ast.literal_eval(node.test.comparators[0]), set())
                results.append('{"output":{"t":[' + encode(ast.unparse(node.test.left), set()) + "," + value + "]}}")
            except BaseException:
                results.append('{"error":"not_an_equality_with_a_literal"}')
        report([("done", "true"), ("results", "[" + ",".join(results) + "]")])

    if execution == "prime_code":
        guard()
        sink = open(os.devnull, "w")
        if mode == "stdin":
            import ast
            source = program
            try:
                tree = ast.parse(source)
                last = tree.body[-1]
                if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
                    source = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
            except BaseException:
                pass
            lines, started = [], False
            for line in source.split("\n"):
                if not (line.startswith("from ") or line.startswith("import ")):
                    if not started:
                        lines.append("stdin = sys.stdin\nstdout = sys.stdout\ndef code():\n")
                        started = True
                    lines.append("\t" + line + "\n")
                else:
                    lines.append(("\t" if started else "") + line + "\n")
            source = "".join(lines)
        else:
            source = program
        module = types.ModuleType("tmp_sol")
        sys.modules["tmp_sol"] = module
        sys.stdout = sink
        try:
            exec(compile(prelude + source, "<string>", "exec"), module.__dict__)
        except BaseException:
            sys.stdout = stdout
            fail("compile_error")
        if mode == "stdin":
            try:
                run = module.code
            except BaseException:
                sys.stdout = stdout
                fail("compile_error")
            patched = sys.stdin
            for test in tests:
                # Each test as prime_code calls code(): the module's stdin patched, sys.stdin a StringIO, print captured.
                inputs = test["input"]
                remaining = iter(inputs.split("\n"))
                patched.read = lambda *a, inputs=inputs: inputs
                patched.readline = lambda *a, remaining=remaining: next(remaining)
                patched.readlines = lambda *a, inputs=inputs: inputs.split("\n")
                sys.stdin = io.StringIO(inputs)
                captured = io.StringIO()
                sys.stdout = captured
                try:
                    run()
                except SystemExit:
                    pass
                except BaseException:
                    results.append('{"error":"runtime_error"}')
                    sys.stdout = sink
                    continue
                # The limit counts the program's bytes, not the report's escapes (up to 6 a byte).
                text = captured.getvalue()
                if output_limit and len_(str_encode(text, "utf-8", "surrogatepass")) > output_limit:
                    results.append('{"error":"output_limit"}')
                else:
                    results.append('{"output":' + encode(text, set()) + "}")
                sys.stdout = sink
            sys.stdout = stdout
            report([("done", "true"), ("results", "[" + ",".join(results) + "]")])
        target = module
    else:
        module = types.ModuleType("__main__" if mode != "call" else "solution")
        if mode != "call":
            sys.modules["__main__"] = module
        module.__dict__["__builtins__"] = builtins
        try:
            code = compile(program if mode != "assert" else program + "\n\n" + argument + "\n", "main.py", "exec")
        except BaseException:
            fail("compile_error")
        try:
            exec(code, module.__dict__)
        except SystemExit as exit:
            if mode != "stdin" or exit.code not in (None, 0):
                fail("exit")
        except BaseException:
            fail("runtime_error")
        if mode == "expression":
            # An assert's left side, evaluated in the program's module; the host compares its value.
            try:
                results.append('{"output":' + encode(eval_(argument, module.__dict__), set()) + "}")
            except BaseException:
                results.append('{"error":"runtime_error"}')
            sys.stdout = stdout
            report([("done", "true"), ("results", "[" + ",".join(results) + "]")])
        if mode != "call":
            report([("done", "true")])
        target = module
    try:
        if "class Solution" in program:
            target = target.Solution()
        function = getattr_(target, argument)
    except BaseException:
        sys.stdout = stdout
        fail("runtime_error")
    for args in calls:
        try:
            result = function(*args)
            if execution == "prime_code" and not isinstance_(result, str) and getattr_(type_(result), "__module__", "").startswith("numpy"):
                raise TypeError("a numpy value: its == gives numpy.bool_, which prime_code's 'is True' rejects")
            results.append('{"output":' + encode(result, set()) + "}")
        except BaseException:
            results.append('{"error":"runtime_error"}')
    sys.stdout = stdout
    report([("done", "true"), ("results", "[" + ",".join(results) + "]")])
`;

/** Python source of a string, as a literal (JSON's escapes are Python's). */
const pyString = (text: string) => JSON.stringify(text);

/**
 * The Python program that runs `program` in `mode` as `execution` says and reports on `channel`.
 * Assert tests always run as programs (prime_code has no assert style).
 */
export function pythonHarness(program: string, mode: HarnessMode, execution: Execution, channel: ReportChannel, outputBytes = 0): string {
  const argument = mode.kind === 'call' ? mode.fnName : mode.kind === 'assert' ? mode.statement : mode.kind === 'expression' ? mode.expression : '';
  const how = mode.kind === 'call' || mode.kind === 'stdin' ? execution : 'program';
  const channelName = channel.kind === 'descriptors' ? 'descriptors' : channel.marker;
  const args = [program, mode.kind, argument, how, channelName, PRELUDE].map(pyString).join(', ');
  return `${HARNESS}\n_flowrl_harness(${args}, ${JSON.stringify(GUARDED)}, ${Math.max(0, Math.floor(outputBytes))})\n`;
}

/** One test: its stdin (or a call's arguments) and expected output (or result). */
export interface HarnessTest {
  input: string;
  expected: string | null;
}

/** Whether the harness reads its tests from stdin (else a standard-input program reads its one test's input itself). */
export const readsTests = (mode: HarnessMode, execution: Execution) => mode.kind === 'call' || mode.kind === 'prepare' || (mode.kind === 'stdin' && execution === 'prime_code');

/** Whether the harness reports a result per test (else only that it got to the end). */
export const reportsResults = (mode: HarnessMode, execution: Execution) => readsTests(mode, execution) || mode.kind === 'expression';

/**
 * The stdin of a harness run: the tests' inputs as JSON text where the harness reads them, else the
 * one test's input. Expected outputs never go in: the host compares.
 */
export function harnessInput(mode: HarnessMode, execution: Execution, tests: HarnessTest[]): string {
  if (readsTests(mode, execution)) return JSON.stringify({ tests: tests.map(({ input }) => ({ input })) });
  if (tests.length !== 1) throw new Error('a program reading stdin runs one test at a time');
  return tests[0].input;
}

/** Nesting a record's values may have: Python's recursion limit (1000) bounds what the harness can encode. */
const MAX_VALUE_DEPTH = 1000;
/** Digits an int may have: Python 3.11 refuses to print a longer one (sys.get_int_max_str_digits). */
const MAX_INT_DIGITS = 4300;
const INT_TEXT = /^-?[0-9]+$/;

/** Why `value` is not a PyValue of at most MAX_VALUE_DEPTH levels; undefined when it is one. Iterative, so no depth overflows the stack. */
function pyValueProblem(value: unknown): string | undefined {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v === 'boolean') continue;
    if (depth > MAX_VALUE_DEPTH) return `a value nested deeper than ${MAX_VALUE_DEPTH}`;
    if (typeof v !== 'object' || Array.isArray(v)) return `${JSON.stringify(v)?.slice(0, 40) ?? typeof v} is not a value's encoding`;
    const keys = Object.keys(v);
    const [tag] = keys;
    const inner = (v as Record<string, unknown>)[tag];
    if (keys.length !== 1) return `an encoded value has ${keys.length} fields`;
    if (tag === 'i') {
      if (typeof inner !== 'string' || !INT_TEXT.test(inner) || inner.length > MAX_INT_DIGITS + 1) return 'an int that is not a digit string Python prints';
    } else if (tag === 'f' || tag === 's') {
      if (typeof inner !== 'string') return `'${tag}' is not a string`;
    } else if (tag === 'l' || tag === 't') {
      if (!Array.isArray(inner)) return `'${tag}' is not an array`;
      for (const item of inner) stack.push([item, depth + 1]);
    } else if (tag === 'd') {
      if (!Array.isArray(inner)) return "'d' is not an array";
      for (const pair of inner) {
        if (!Array.isArray(pair) || pair.length !== 2) return "a dict item is not a [key, value] pair";
        // The harness encodes str, int, float, bool and None keys only (json.dumps's); a nested key
        // would only make the host's hashing slow.
        const key: unknown = pair[0];
        const scalar = key === null || typeof key === 'boolean' || (typeof key === 'object' && !Array.isArray(key) && ['i', 'f', 's'].includes(Object.keys(key)[0]));
        if (!scalar) return 'a dict key that is not a str, int, float, bool or None';
        stack.push([key, depth + 1], [pair[1], depth + 1]);
      }
    } else {
      return `unknown value tag '${tag}'`;
    }
  }
  return undefined;
}

/** Why a parsed report is not a record of exactly the shape the harness writes; undefined when it is one. */
function recordProblem(record: unknown): string | undefined {
  if (typeof record !== 'object' || record === null || Array.isArray(record)) return 'not an object';
  const r = record as Record<string, unknown>;
  const extra = Object.keys(r).filter((key) => !['done', 'results', 'error'].includes(key));
  if (extra.length) return `unknown field '${extra[0]}'`;
  if (typeof r.done !== 'boolean') return "'done' is not true or false";
  if (r.error !== undefined && typeof r.error !== 'string') return "'error' is not a string";
  if (r.results === undefined) return undefined;
  if (!Array.isArray(r.results)) return "'results' is not an array";
  for (const [i, result] of (r.results as unknown[]).entries()) {
    if (typeof result !== 'object' || result === null || Array.isArray(result)) return `results[${i}] is not an object`;
    for (const [key, value] of Object.entries(result)) {
      const problem = key === 'error' ? (typeof value === 'string' ? undefined : 'not a string') : key === 'output' ? pyValueProblem(value) : 'an unknown field';
      if (problem) return `results[${i}].${key}: ${problem}`;
    }
  }
  return undefined;
}

/**
 * Reads a harness record; undefined when there is none (the program ended before the harness got
 * to write it). A report that is not JSON or not exactly a record's shape was written by the
 * program, or over the harness's: a ScoringError ('malformed_report'), so the response scores 0
 * and is counted, whatever its tests.
 */
export function readHarnessRecord(report: string | undefined): HarnessRecord | undefined {
  if (report === undefined) return undefined;
  let record: unknown;
  try {
    record = JSON.parse(report);
  } catch {
    throw new ScoringError('malformed_report', `the harness report is not JSON (${report.length} characters)`);
  }
  const problem = recordProblem(record);
  if (problem) throw new ScoringError('malformed_report', `the harness report is not a record: ${problem}`);
  return record as HarnessRecord;
}

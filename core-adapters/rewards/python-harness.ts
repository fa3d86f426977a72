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
// Records: {"done": true} (assert tests, and standard-input tests run as programs: the output is
// the process's stdout), {"done": true, "output": V} (standard-input tests under prime_code: the
// captured output, a str), {"done": true, "output": V, "expected": V} (call-based), or
// {"done": false, "error": "..."}. V is a Python value with its types kept: null, true/false,
// {"i": "<digits>"}, {"f": "<repr>"}, {"s": "<utf-8 hex>"}, {"l": [...]}, {"t": [...]},
// {"d": [[k, v], ...]}. Only what json.dumps accepts is encoded (verl serialises a result before
// comparing, so anything else fails there too), and under prime_code a numpy scalar result fails
// (verl's `is True` check rejects the numpy.bool_ its == gives); subclasses are read as their base
// type, so an overridden __eq__ changes nothing.

/** How a test's program is run: reading stdin, as a function called per test, or followed by an assert. */
export type HarnessMode = { kind: 'stdin' } | { kind: 'call'; fnName: string } | { kind: 'assert'; statement: string };

/** prime_code: as verl's prime_code runs it (the default); program: as a real program. */
export type Execution = 'prime_code' | 'program';

/** Where the record goes: descriptors 4 and 5 (the local sandbox), or stderr after a marker line. */
export type ReportChannel = { kind: 'descriptors' } | { kind: 'stderr'; marker: string };

/** One test's record as the harness wrote it. */
export interface HarnessRecord {
  done: boolean;
  output?: PyValue;
  expected?: PyValue;
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
def _flowrl_harness(program, mode, argument, execution, channel, prelude, guarded):
    import os, sys, builtins, json, io, types
    # Everything used after the program has run is bound now, out of its reach.
    os_write, os_exit, os_read, os_close = os.write, os._exit, os.read, os.close
    isinstance_, type_, len_, id_, range_, getattr_ = isinstance, type, len, id, range, getattr
    int_repr, float_repr, str_str, str_encode, bytes_hex = int.__repr__, float.__repr__, str.__str__, str.encode, bytes.hex
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
            return '{"s":"' + bytes_hex(str_encode(str_str(value), "utf-8", "surrogatepass")) + '"}'
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

    # The test's input (and expected result) come on stdin, read to its end before the program runs.
    spec = json.loads(sys.stdin.read()) if mode == "call" or (mode == "stdin" and execution == "prime_code") else None
    if mode == "call":
        args = [json.loads(line) for line in spec["input"].split("\n")]
        if args and isinstance(args[0], dict):
            converted, value = int_keys(args[0])
            if converted:
                args = [value]
        expected = json.loads(spec["expected"])
        if isinstance(expected, dict):
            converted, value = int_keys(expected)
            if converted:
                expected = [value]
        elif isinstance(expected, list) and expected and isinstance(expected[0], dict):
            converted, value = int_keys(expected[0])
            if converted:
                expected = [value]
        expected_text = encode(expected, set())

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
            inputs = spec["input"]
            remaining = iter(inputs.split("\n"))
            patched = sys.stdin
            patched.read = lambda *a: inputs
            patched.readline = lambda *a: next(remaining)
            patched.readlines = lambda *a: inputs.split("\n")
            sys.stdin = io.StringIO(inputs)
            captured = io.StringIO()
            sys.stdout = captured
            try:
                run()
            except SystemExit:
                pass
            except BaseException:
                sys.stdout = stdout
                fail("runtime_error")
            sys.stdout = stdout
            report([("done", "true"), ("output", encode(captured.getvalue(), set()))])
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
        if mode != "call":
            report([("done", "true")])
        target = module
    try:
        if "class Solution" in program:
            target = target.Solution()
        result = getattr(target, argument)(*args)
        if execution == "prime_code" and getattr_(type_(result), "__module__", "").startswith("numpy"):
            raise TypeError("a numpy value: its == gives numpy.bool_, which prime_code's 'is True' rejects")
        if isinstance(result, tuple):
            result = list(result)
        output_text = encode(result, set())
    except BaseException:
        sys.stdout = stdout
        fail("runtime_error")
    sys.stdout = stdout
    report([("done", "true"), ("output", output_text), ("expected", expected_text)])
`;

/** Python source of a string, as a literal (JSON's escapes are Python's). */
const pyString = (text: string) => JSON.stringify(text);

/**
 * The Python program that runs `program` in `mode` as `execution` says and reports on `channel`.
 * Assert tests always run as programs (prime_code has no assert style).
 */
export function pythonHarness(program: string, mode: HarnessMode, execution: Execution, channel: ReportChannel): string {
  const argument = mode.kind === 'call' ? mode.fnName : mode.kind === 'assert' ? mode.statement : '';
  const how = mode.kind === 'assert' ? 'program' : execution;
  const channelName = channel.kind === 'descriptors' ? 'descriptors' : channel.marker;
  const args = [program, mode.kind, argument, how, channelName, PRELUDE].map(pyString).join(', ');
  return `${HARNESS}\n_flowrl_harness(${args}, ${JSON.stringify(GUARDED)})\n`;
}

/**
 * The stdin a test's harness reads: the test input (and a call's expected result) as JSON text; a
 * standard-input test run as a program reads its input itself.
 */
export function harnessInput(mode: HarnessMode, execution: Execution, input: string, expected: string | null): string {
  if (mode.kind === 'call') return JSON.stringify({ input, expected });
  if (mode.kind === 'stdin' && execution === 'prime_code') return JSON.stringify({ input });
  return input;
}

/** Reads a harness record; undefined when there is none or it does not parse (the program interfered). */
export function readHarnessRecord(report: string | undefined): HarnessRecord | undefined {
  if (report === undefined) return undefined;
  try {
    const record = JSON.parse(report) as HarnessRecord;
    return typeof record === 'object' && record !== null && typeof record.done === 'boolean' ? record : undefined;
  } catch {
    return undefined;
  }
}

// Code rewards: verl's test formats scored in the bubblewrap sandbox, hostile programs contained,
// the SandboxFusion client against a fake server, and `flowrl reward`.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { asciiDigits, extractCode, findSandboxTools, harnessInput, judgeRun, judgeRunHere, JUDGE_HERE_MAX, parseCodeTests, readHarnessRecord, Sandbox, ReusedRuns, SANDBOX_UIDS, SandboxFusionRunner, SandboxRunner, sameCallResult, sameOutput, scoreCode, scoreResponse, scoreValue, type PyValue, type ScoreResult } from '../core-adapters/rewards/index.js';
import { ScorerUnavailable, type ScoringError } from '../core-adapters/errors.js';
import { expectedCallResult, pyJsonLoads } from '../core-adapters/rewards/py-json.js';
import { rewardCommand } from '../core-adapters/cli/reward-command.js';
import { expectInputError, expectInputErrorAsync, ROOT, runCommand, runBuiltFlowrl, tempDir, worldReadableSandboxDir } from './helpers.js';
import { PROGRAMS } from './sandbox-hostile-programs.js';

const isSandboxUid = (uid: number) => uid >= SANDBOX_UIDS.first && uid < SANDBOX_UIDS.first + SANDBOX_UIDS.count;

/**
 * Processes left on the machine under the sandbox's uids, outside any live run: a run's own
 * setpriv, prlimit and bwrap, and whatever a sandbox-uid process started, belong to a run still going
 * (other test files may be running sandboxes meanwhile); an orphan's parent is the machine's init.
 */
function sandboxProcesses(): number[] {
  return fs
    .readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        if (!isSandboxUid(fs.statSync(`/proc/${p}`).uid)) return false;
        const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
        const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        return !['setpriv', 'prlimit', 'bwrap'].includes(name) && !isSandboxUid(fs.statSync(`/proc/${ppid}`).uid);
      } catch {
        return false;
      }
    })
    .map(Number);
}

const score = async (runner: SandboxRunner, response: string, truth: unknown, mode: 'fraction' | 'all' = 'fraction') => scoreValue((await scoreCode(runner, response, truth, mode)) as ScoreResult);

describe('code rewards', function () {
  this.timeout(60_000);
  const runner = new SandboxRunner(new Sandbox({ limits: { wallSeconds: 2, cpuSeconds: 1, memoryMb: 256, outputBytes: 65536 }, concurrency: 4 }));

  describe('test formats (verl v0.9.0 prime_code and sandbox_fusion)', () => {
    it('reads standard-input, call-based and assert tests, from JSON text or objects', () => {
      expect(parseCodeTests('{"inputs": ["1\\n"], "outputs": ["2\\n"]}')).to.deep.equal({ inputs: ['1\n'], outputs: ['2\n'] });
      expect(parseCodeTests({ fn_name: 'f', inputs: ['1\n[2, 3]'], outputs: ['5'] })).to.deep.equal({ inputs: ['1\n[2, 3]'], outputs: ['5'], fnName: 'f' });
      expect(parseCodeTests({ assert_case: ['assert f() == 1'] })).to.deep.equal({ inputs: [''], outputs: [null], asserts: ['assert f() == 1'] });
    });

    it('refuses malformed tests with the reason', () => {
      const cases: [unknown, string][] = [
        ['{"inputs": [', 'not JSON test cases'],
        [[1, 2], 'must be an object'],
        [{ inputs: [], outputs: [] }, 'inputs must be a non-empty list'],
        [{ inputs: ['1'], outputs: [2] }, 'outputs must be a list of strings'],
        [{ inputs: ['1', '2'], outputs: ['1'] }, '2 inputs but 1 outputs'],
        [{ fn_name: 'not a name', inputs: ['1'], outputs: ['1'] }, 'fn_name must be a Python identifier'],
        [{ fn_name: 'f', inputs: ['1\nnot json'], outputs: ['1'] }, 'inputs[0]: each line must be one JSON argument'],
        [{ fn_name: 'f', inputs: ['1'], outputs: ['{'] }, 'outputs[0] must be JSON'],
        [{ assert_case: [] }, 'assert_case must be a non-empty list'],
      ];
      for (const [truth, message] of cases) expectInputError(() => parseCodeTests(truth), message);
    });

    it("takes the program after the last ```python fence, else the whole response; compares output as prime_code's ladder does", () => {
      expect(extractCode('text\n```python\nprint(1)\n```\nmore ```python\nprint(2)\n```')).to.equal('\nprint(2)\n');
      expect(extractCode('print(3)')).to.equal('print(3)');
      expect(sameOutput('3\n', '3')).to.equal(true);
      expect(sameOutput('  1 2  \n3\n\n', '1 2\n3')).to.equal(true);
      expect(sameOutput('1\n\n2', '1\n2\n')).to.equal(true); // empty lines dropped
      expect(sameOutput('1\r2', '1\n2')).to.equal(true); // Python's splitlines
      expect(sameOutput('1  2\n3', '1 2\n3')).to.equal(false); // no token rung in prime_code
      expect(sameOutput('0.3333333', '0.33333333')).to.equal(true); // allclose, line by line
      expect(sameOutput('0.3333333 1', '0.33333333 1')).to.equal(false); // not on a line of several numbers
      expect(sameOutput('0.34', '0.33')).to.equal(false);
      expect(sameOutput('2 1', '1 2')).to.equal(false); // no unordered sets
      expect(sameOutput('', '0')).to.equal(false);
      // Integers: exact, whatever their size or sign; Python's float() grammar, not JavaScript's.
      expect(sameOutput('1000000000', '1000000007')).to.equal(false);
      expect(sameOutput('-1000000000\n0.5', '-1000000007\n0.5')).to.equal(false);
      expect(sameOutput('-100000000000000000001\n0.5', '-100000000000000000000\n0.5')).to.equal(false);
      // An expected integer is matched by that integer only, printed as one or as a float of that value.
      expect(sameOutput('-1000000000.0\n', '-1000000007\n')).to.equal(false);
      expect(sameOutput('5.0\n', '5\n')).to.equal(true);
      expect(sameOutput('1e20\n', '100000000000000000000\n')).to.equal(true);
      expect(sameOutput('5.000001\n', '5\n')).to.equal(false);
      expect(sameOutput('0.3333334\n', '0.3333333\n')).to.equal(true); // expected floats keep the tolerance
      expect(sameOutput('0x10\n0.5', '16\n0.5')).to.equal(false);
      expect(sameOutput('025', '25')).to.equal(false);
      expect(sameOutput('1e3\n0.5', '1000\n0.5')).to.equal(true); // as verl: a float line within tolerance
      expect(sameOutput('1\x1f\n2.0', '1\n2')).to.equal(false); // float() refuses U+001F, which strip() takes
      // Python's json.loads takes NaN and Infinity; so does the row check.
      expect(parseCodeTests({ fn_name: 'f', inputs: ['[1, NaN]\n"Infinity"'], outputs: ['-Infinity'] }).fnName).to.equal('f');
      // The tuple rule is [list(x) for x in output]: a number among the tuples fails it, a str is its characters.
      const py = (v: unknown): PyValue => (typeof v === 'number' ? { i: String(v) } : typeof v === 'string' ? { s: v } : Array.isArray(v) ? { l: v.map(py) } : (v as PyValue));
      const tuple = (...v: unknown[]): PyValue => ({ t: v.map(py) });
      expect(sameCallResult({ l: [tuple(1, 2), tuple(3)] }, py([[[1, 2], [3]]]))).to.equal(true);
      expect(sameCallResult({ l: [tuple(), py(0), py('a')] }, py([[[], 0, 'a']]))).to.equal(false);
      expect(sameCallResult({ l: [tuple(), py('ab')] }, py([[[], ['a', 'b']]]))).to.equal(true);
    });

    it('scores the fraction of tests passed, or all-or-nothing (hand-computed)', async () => {
      // a + b passes 2 of 3 (the third expects a product).
      const stdio = { inputs: ['1 2\n', '3 4\n', '2 5\n'], outputs: ['3\n', '7\n', '10\n'] };
      const sum = '```python\na, b = map(int, input().split())\nprint(a + b)\n```';
      expect(await score(runner, sum, stdio)).to.deep.equal({ score: 2 / 3, extras: { acc: false, passed_fraction: 2 / 3 } });
      expect((await score(runner, sum, stdio, 'all')).score).to.equal(0);
      // Call-based: a global function, a Solution method, a tuple result as a list, a list matching the expected list's first element.
      const call = { fn_name: 'pair', inputs: ['1\n2', '3\n4', '0\n0', '5\n5'], outputs: ['[1, 2]', '[3, 4]', '[[0, 0]]', '[5, 6]'] };
      expect((await score(runner, 'def pair(a, b):\n    return (a, b)', call)).score).to.equal(3 / 4);
      expect((await score(runner, 'class Solution:\n    def pair(self, a, b):\n        return [a, b]', call)).score).to.equal(3 / 4);
      // Assert style: 1 of 2 holds; a response that does not define g fails both.
      const asserts = { assert_case: ['assert g(2) == 4', 'assert g(3) == 10'] };
      expect((await score(runner, 'def g(x):\n    return x * x', asserts)).score).to.equal(1 / 2);
      expect((await score(runner, 'print("no g here")', asserts)).score).to.equal(0);
      expect((await score(runner, 'def g(x):\n    return x * x', { assert_case: ['assert g(2) == 4'] }, 'all')).score).to.equal(1);
      // A syntax error fails every test.
      expect((await score(runner, 'def (', stdio)).score).to.equal(0);
    });
  });

  describe('the harness: a program is scored on what it did, not on its exit status or its stdout', () => {
    const sq = { assert_case: ['assert sq(3) == 9', 'assert sq(4) == 16'] };
    const honest = 'def sq(x):\n    return x * x';

    it('an assert test passes only when the asserts ran: early exits, atexit hooks and forged records score 0', async () => {
      expect((await score(runner, honest, sq)).score).to.equal(1);
      const hacks = [
        'def sq(x):\n    return 0\nimport sys\nsys.exit(0)',
        'def sq(x):\n    return 0\nimport os\nos._exit(0)',
        'def sq(x):\n    return 0\nimport atexit, os\natexit.register(lambda: os._exit(0))\nraise SystemExit(0)',
        'def sq(x):\n    return 0\nimport os\nos.write(5, b\'{"done": true}\')\nos._exit(0)',
        'def sq(x):\n    return 0\nimport os\nos.write(5, b\'0123456789abcdef0123456789abcdef\\n{"done": true}\')\nos._exit(0)',
        'def sq(x):\n    return 0\nimport builtins\nbuiltins.AssertionError = SystemExit',
      ];
      for (const hack of hacks) expect((await score(runner, hack, sq)).score, hack).to.equal(0);
      // A record forged with the harness's secret (read from its frame) says only "done": an
      // EXPR == LITERAL assert needs EXPR's value in it, and the expected value is not in the process.
      const introspection = 'def sq(x):\n    return 0\nimport sys, os\nf = sys._getframe(1)\nos.write(f.f_locals["fd"], f.f_locals["head"] + b"\\n" + b\'{"done": true}\')\nos._exit(0)';
      expect((await score(runner, introspection, sq)).score).to.equal(0);
      // Nor can the program read the asserts back from the file it runs in, or answer with an
      // object that equals anything.
      const reader = 'import sys, re\nsource = open(sys.argv[0]).read() if sys.argv and sys.argv[0] else ""\nseen = re.findall(r"sq\\(3\\) == (\\d+)", source)\ndef sq(x):\n    return int(seen[-1]) if seen else 0';
      expect((await score(runner, reader, { assert_case: ['assert sq(3) == 9'] })).score).to.equal(0);
      expect((await score(runner, 'class Any:\n    def __eq__(self, other):\n        return True\ndef sq(x):\n    return Any()', sq)).score).to.equal(0);
      // A numpy integer is the integer it equals (as == takes it in an assert); an array is not a value.
      expect((await score(runner, 'import numpy as np\ndef sq(x):\n    return np.int64(x) * x', sq)).score).to.equal(1);
      expect((await score(runner, 'import numpy as np\ndef sq(x):\n    return np.array([x * x])', sq)).score).to.equal(0);
      // What remains, as docs/code-rewards.md says: an assert of another form runs in the program's
      // process, and the frame trick passes it.
      const otherForm = { assert_case: ['assert sq(3) in (9,)'] };
      expect((await score(runner, honest, otherForm)).score).to.equal(1);
      expect((await score(runner, introspection, otherForm)).score).to.equal(1);
    });

    it("call-based: prints of the program's own do not matter; an __eq__ that equals anything gains nothing", async () => {
      const add = { fn_name: 'add', inputs: ['1\n2', '5\n5'], outputs: ['3', '10'] };
      const demo = 'print("demo:", 1 + 2)\ndef add(a, b):\n    print("adding", a, b)\n    return a + b\nif __name__ == "__main__":\n    print(add(2, 2))';
      for (const execution of ['prime_code', 'program'] as const) {
        expect(scoreValue((await scoreCode(runner, demo, add, 'prime_code', execution)) as ScoreResult).score, execution).to.equal(1);
        const liars = [
          'class Any:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Any()',
          'class Int(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Int(0)',
          'class Lst(list):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Lst()',
        ];
        for (const liar of liars) expect(scoreValue((await scoreCode(runner, liar, add, 'fraction', execution)) as ScoreResult).score, liar).to.equal(0);
      }
      // Strings keep every code unit, lone surrogates included; a numpy str compares as verl's does.
      expect((await score(runner, 'print(input())', { inputs: ['\ud800'], outputs: ['\ud800'] })).score).to.equal(1);
      expect((await score(runner, 'import numpy as np\ndef f(a):\n    return np.array(["ab", "c"])[0]', { fn_name: 'f', inputs: ['1'], outputs: ['"ab"'] })).score).to.equal(1);
      // An int subclass that tells the truth is its value, as json.dumps reads it.
      expect((await score(runner, 'class Int(int):\n    pass\ndef add(a, b):\n    return Int(a + b)', add)).score).to.equal(1);
    });

    it("prime_code scoring as verl's: a first pass over the whole row in one run, then the first 10 one by one when any fails", async () => {
      let runs = 0;
      const counting = { channel: runner.channel, run: (code: string, stdin: string) => (runs++, runner.run(code, stdin)) };
      const square = { inputs: Array.from({ length: 12 }, (_, i) => `${i}\n`), outputs: Array.from({ length: 12 }, (_, i) => `${i * i}\n`) };
      const scored = async (program: string, truth: unknown) => {
        runs = 0;
        return { score: scoreValue((await scoreCode(counting, program, truth, 'prime_code')) as ScoreResult).score, runs };
      };
      expect(await scored('n = int(input())\nprint(n * n)', square)).to.deep.equal({ score: 1, runs: 1 });
      // Wrong on input 2 only: 9 of the first 10 (the 12th does not count), after 1 + 10 runs.
      expect(await scored('n = int(input())\nprint(5 if n == 2 else n * n)', square)).to.deep.equal({ score: 0.9, runs: 11 });
      // A call-based row that fails one test is rerun as standard-input programs, which print nothing here.
      const add = { fn_name: 'add', inputs: ['1\n2', '100\n1'], outputs: ['3', '101'] };
      expect(await scored('def add(a, b):\n    return 0 if a == 100 else a + b', add)).to.deep.equal({ score: 0, runs: 3 });
      expect(await scored('def add(a, b):\n    return a + b', add)).to.deep.equal({ score: 1, runs: 1 });
    });

    it('prime_code and program execution differ where verl is not a real program: exit(), sys.stdin.buffer, global', async () => {
      const echo = { inputs: ['7\n'], outputs: ['7\n'] };
      const cases: [string, number, number][] = [
        ['print(input())\nexit()', 0, 1],
        ['import sys\nprint(sys.stdin.buffer.read().decode().strip())', 0, 1],
        ['n = int(input())\ndef show():\n    global n\n    print(n)\nshow()', 0, 1],
        ['print(int(sqrt(49)))', 1, 0],
      ];
      for (const [program, primeCode, asProgram] of cases) {
        expect(scoreValue((await scoreCode(runner, program, echo, 'prime_code', 'prime_code')) as ScoreResult).score, `prime_code: ${program}`).to.equal(primeCode);
        expect(scoreValue((await scoreCode(runner, program, echo, 'prime_code', 'program')) as ScoreResult).score, `program: ${program}`).to.equal(asProgram);
      }
    });
  });

  describe('hostile programs score 0 within their limits and leave the host as it was', () => {
    it('loops, forks, exhausts memory, floods output, reads and writes outside, connects out, signals others, leaves daemons', async () => {
      const home = os.homedir();
      const secretFile = path.join(home, `.flowrl-sandbox-secret-${process.pid}`);
      const secret = `secret-${Math.random().toString(36).slice(2)}`;
      fs.writeFileSync(secretFile, secret);
      const outside = path.join(tempDir('flowrl-sandbox-host-'), 'written-from-inside');
      let connections = 0;
      const server = http.createServer((_, res) => res.end('connected')).on('connection', () => connections++);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const port = (server.address() as AddressInfo).port;
      // A process of the host's that a program would like to kill.
      const bystander = spawn('sleep', ['60'], { stdio: 'ignore' });
      const passwd = fs.readFileSync('/etc/passwd', 'utf8');
      try {
        // Each expects what the program would print if it got its way.
        const cases: [string, string, string][] = [
          ['an infinite loop', 'while True:\n    pass', 'done'],
          ['a fork bomb', 'import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass', 'done'],
          ['memory exhaustion', 'x = []\nwhile True:\n    x.append(bytearray(10**7))\nprint("done")', 'done'],
          ['a huge print', 'while True:\n    print("x" * 10000)', 'done'],
          ['reading /etc/passwd', 'print(open("/etc/passwd").read(), end="")', passwd],
          ["reading the user's home", `print(open(${JSON.stringify(secretFile)}).read())`, secret],
          ['writing outside its /tmp', `open(${JSON.stringify(outside)}, "w").write("x")\nprint("written")`, 'written'],
          ['a network connection', `import urllib.request\nprint(urllib.request.urlopen("http://127.0.0.1:${port}/", timeout=2).read().decode())`, 'connected'],
          ['signalling other processes', `import os, signal\nos.kill(${bystander.pid}, signal.SIGKILL)\nprint("killed")`, 'killed'],
          ['signalling every process it can', 'import os, signal\nos.kill(-1, signal.SIGKILL)\nos.kill(os.getppid(), signal.SIGKILL)\nprint("killed")', 'killed'],
          ['a daemon that outlives the run', 'import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(30)\n    os._exit(0)\nprint("left one")\nprint("x" if os.path.exists("/nothing") else "")', 'never'],
        ];
        const started = performance.now();
        const results = await Promise.all(
          cases.map(async ([name, program, expected]) => {
            const t = performance.now();
            const result = await score(runner, program, { inputs: [''], outputs: [expected] });
            return { name, score: result.score, seconds: (performance.now() - t) / 1000 };
          }),
        );
        for (const r of results) {
          expect(r.score, r.name).to.equal(0);
          // Wall limit 2 s, plus queueing behind at most two rounds of 4 concurrent runs.
          expect(r.seconds, r.name).to.be.below(8);
        }
        expect((performance.now() - started) / 1000).to.be.below(12);
        expect(fs.existsSync(outside), 'a file written outside').to.equal(false);
        expect(connections, 'connections reaching the host').to.equal(0);
        expect(bystander.exitCode, 'the bystander process').to.equal(null);
        expect(process.kill(bystander.pid!, 0)).to.equal(true);
        // Nothing of any run is left running (a sandbox's init may take a moment to be reaped).
        for (let i = 0; i < 50 && sandboxProcesses().length; i++) await new Promise((resolve) => setTimeout(resolve, 100));
        expect(sandboxProcesses(), 'processes left under sandbox uids').to.deep.equal([]);
        // A well-behaved program still runs afterwards.
        expect((await score(runner, 'print(input()[::-1])', { inputs: ['abc'], outputs: ['cba'] })).score).to.equal(1);
      } finally {
        bystander.kill();
        server.close();
        fs.rmSync(secretFile, { force: true });
      }
    });

    // As root the suite runs each program under its own uid; this runs the other path, a normal user's:
    // the built module (npm test builds dist/) copied where any user can read it, run as nobody.
    (process.getuid?.() === 0 ? it : it.skip)("as a user without root: the process limit counts on top of the user's own threads; a fork bomb is contained, files stay out of reach", async () => {
      const runner = [
        "import { Sandbox } from './rewards/sandbox.js';",
        'const sandbox = new Sandbox({ limits: { wallSeconds: 2, cpuSeconds: 1, processes: 8 }, concurrency: 2 });',
        "const fork = await sandbox.run('python', 'import os\\nwhile True:\\n    os.fork()');",
        "const ok = await sandbox.run('python', 'print(input()[::-1])', 'abc');",
        "const passwd = await sandbox.run('python', 'print(open(\"/etc/passwd\").read())');",
        'console.log(JSON.stringify({ uid: process.getuid(), fork: fork.status, ok: [ok.status, ok.stdout], passwd: [passwd.exitCode, passwd.stdout] }));',
      ].join('\n');
      const dir = worldReadableSandboxDir('flowrl-sandbox-user-', { 'run.js': runner });
      try {
        const run = await runCommand('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, path.join(dir, 'run.js')], dir, 60_000, { HOME: dir });
        expect(run.status, run.stderr).to.equal(0);
        const result = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as { uid: number; fork: string; ok: [string, string]; passwd: [number, string] };
        expect(result.uid).to.equal(65534);
        expect(['timeout', 'exited', 'signalled']).to.include(result.fork);
        expect(result.ok).to.deep.equal(['exited', 'cba\n']);
        expect(result.passwd).to.deep.equal([1, '']);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    it('64 responses scored at once, hostile and correct mixed: the scorer ends in its bound, correct ones score 1, nothing is left', async () => {
      // Through the scorer as training calls it (the harness, programs run as written so nothing is disabled for them).
      // Wall three times the CPU limit, as reward_model.code.wall_factor has it: 16 runs share two cores
      // with the hogs (and a loaded machine's other work), so a correct program may wait for a core.
      const batch = new SandboxRunner(new Sandbox({ limits: { wallSeconds: 3, cpuSeconds: 1, memoryMb: 256, outputBytes: 65536 }, concurrency: 16 }));
      const kinds = ['sleeper', 'forkChain', 'shmFiles', 'memfd', 'sysv', 'fakeBwrap', 'earlyExit'] as const;
      const correct = 'print(sum(int(x) for x in input().split()))';
      const jobs = Array.from({ length: 64 }, (_, i) => {
        const numbers = Array.from({ length: 5 }, (_, j) => i * 10 + j);
        const truth = { inputs: [numbers.join(' ')], outputs: [String(numbers.reduce((a, b) => a + b, 0))] };
        return i % 8 === 7 ? { kind: 'correct', program: correct, truth } : { kind: kinds[i % 8], program: PROGRAMS[kinds[i % 8]], truth };
      });
      const shmBefore = fs.readdirSync('/dev/shm').length;
      const sysvBefore = fs.readFileSync('/proc/sysvipc/shm', 'utf8');
      const rssBefore = process.memoryUsage().rss;
      const started = performance.now();
      const scores = await Promise.all(jobs.map(async (job) => scoreValue((await scoreCode(batch, job.program, job.truth, 'prime_code', 'program')) as ScoreResult).score));
      const seconds = (performance.now() - started) / 1000;
      jobs.forEach((job, i) => expect(scores[i], `${job.kind} #${i}`).to.equal(job.kind === 'correct' ? 1 : 0));
      // Four rounds of 16 at the 3 s wall limit (and its 0.5 s grace), with room for a busy machine.
      expect(seconds).to.be.below(4 * 3.5 + 6);
      expect(process.memoryUsage().rss - rssBefore, "the scorer's own memory").to.be.below(200 * 1024 * 1024);
      for (let i = 0; i < 50 && sandboxProcesses().length; i++) await new Promise((resolve) => setTimeout(resolve, 100));
      expect(sandboxProcesses(), 'processes left under sandbox uids').to.deep.equal([]);
      expect(fs.readdirSync('/dev/shm').length, "the host's /dev/shm").to.equal(shmBefore);
      expect(fs.readFileSync('/proc/sysvipc/shm', 'utf8'), "the host's SysV shared memory").to.equal(sysvBefore);
    });

    it('the sandbox reports output cut at the limit and the run stopped for it', async () => {
      const sandbox = new Sandbox({ limits: { outputBytes: 1000, wallSeconds: 3 }, concurrency: 1 });
      const run = await sandbox.run('python', 'import sys\nwhile True:\n    sys.stdout.write("y" * 100)');
      expect(run.status).to.equal('output_limit');
      expect(run.stdout.length).to.equal(1000);
      const js = await sandbox.run('javascript', 'process.stdin.on("data", (d) => console.log(String(d).toUpperCase()))', 'hi');
      expect([js.status, js.stdout]).to.deep.equal(['exited', 'HI\n']);
    });

    it('without bubblewrap the scorer names the package to install and never runs the program unsandboxed', () => {
      expectInputError(() => findSandboxTools(['/nonexistent']), 'bwrap', 'apt-get install bubblewrap', 'never run unsandboxed');
    });
  });

  describe('SandboxFusion client', () => {
    it("posts verl's run_code request per test and reads SandboxFusion's answer; 504 is retried, a sandbox error stops with the reason", async () => {
      const requests: Record<string, unknown>[] = [];
      let gatewayTimeouts = 1;
      // A fake SandboxFusion server (RunCodeRequest/RunCodeResponse as sandbox/server/sandbox_api.py at
      // 53a6341 defines them): runs the posted code in the local sandbox, as the server would in its own.
      const local = new Sandbox({ limits: { wallSeconds: 4, cpuSeconds: 4 } });
      const server = http.createServer((req, res) => {
        let body = '';
        req.on('data', (d) => (body += d));
        req.on('end', () => {
          void (async () => {
            const request = JSON.parse(body) as { code: string; stdin: string };
            requests.push({ ...request, path: req.url, contentType: req.headers['content-type'] });
            const answer = (status: number, value?: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(value === undefined ? undefined : JSON.stringify(value));
            if (request.code.includes('gateway') && gatewayTimeouts-- > 0) return answer(504);
            if (request.code.includes('time.sleep')) return answer(200, { status: 'Failed', message: '', compile_result: null, run_result: { status: 'TimeLimitExceeded', execution_time: 4, return_code: null, stdout: 'partial', stderr: '' }, executor_pod_name: null, files: {} });
            if (request.code.includes('# broken')) return answer(200, { status: 'SandboxError', message: 'no executor', compile_result: null, run_result: null });
            if (request.code.includes('# too big')) return answer(413, { detail: 'request too large' });
            if (request.code.includes('# gone')) return answer(404, { detail: 'Not Found' });
            if (request.code.includes('# garbled')) return void res.writeHead(200, { 'content-type': 'text/html' }).end('<html>proxy error</html>');
            const run = await local.run('python', request.code, request.stdin);
            const ok = run.status === 'exited' && run.exitCode === 0;
            const run_result = { status: ok || run.status === 'exited' ? 'Finished' : 'Error', execution_time: run.wallMs / 1000, return_code: run.exitCode, stdout: run.stdout, stderr: run.stderr };
            answer(200, { status: ok ? 'Success' : 'Failed', message: '', compile_result: null, run_result, executor_pod_name: null, files: {} });
          })();
        });
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/run_code`;
      const fusion = new SandboxFusionRunner(url, { timeoutS: 4, memoryLimitMb: 1024, maxConcurrent: 2, retryDelayMs: 10 });
      try {
        const truth = { inputs: ['a', 'b', 'c'], outputs: ['a', 'b', 'x'] };
        expect(scoreValue((await scoreCode(fusion, 'print(input())', truth, 'fraction')) as ScoreResult).score).to.equal(2 / 3);
        expect(requests[0]).to.deep.include({ path: '/run_code', contentType: 'application/json', language: 'python', compile_timeout: 4, run_timeout: 4, memory_limit_MB: 1024, files: {}, fetch_files: [] });
        // The program goes inside the harness, whose record comes back on stderr after its marker.
        expect(requests[0].code).to.include('print(input())').and.include(fusion.channel.kind === 'stderr' ? fusion.channel.marker : 'no marker');
        expect(scoreValue((await scoreCode(fusion, 'raise SystemExit(1)', truth, 'fraction')) as ScoreResult).score).to.equal(0);
        expect(scoreValue((await scoreCode(fusion, 'import time; time.sleep(9)', { inputs: ['partial'], outputs: ['partial'] }, 'fraction')) as ScoreResult).score).to.equal(0);
        requests.length = 0;
        expect(scoreValue((await scoreCode(fusion, '# gateway\nprint(input())', { inputs: ['a'], outputs: ['a'] }, 'all')) as ScoreResult).score).to.equal(1);
        expect(requests.length).to.equal(2);
        let error: Error | undefined;
        await scoreCode(fusion, '# broken', truth, 'fraction').catch((e: Error) => (error = e));
        expect(error?.message).to.include('sandbox error (no executor)');
        // Refused for what it holds: this response's, scored 0 and counted. A wrong URL or a body
        // that is not JSON: the server's, and the run stops.
        const scorer = (text: string, truth: unknown) => scoreCode(fusion, text, truth, 'fraction');
        const refused = await scoreResponse(scorer, '# too big\nprint(1)', { inputs: ['1'], outputs: ['1'] }, {}, 'apps');
        expect([refused.score, refused.error?.kind]).to.deep.equal([0, 'sandbox_refused']);
        for (const [program, why] of [['# gone', 'answered 404'], ['# garbled', 'not JSON']]) {
          let stopped: unknown;
          await scoreResponse(scorer, `${program}\nprint(1)`, { inputs: ['1'], outputs: ['1'] }, {}, 'apps').catch((e: unknown) => (stopped = e));
          expect(stopped, program).to.be.instanceOf(ScorerUnavailable);
          expect((stopped as Error).message).to.include(why);
        }
      } finally {
        server.close();
      }
    });
  });

  describe('reuse of identical runs (reward_model.code.reuse_runs)', () => {
    it('runs each distinct program and input once, in flight or done, up to the capacity; a failed, timed-out or long-output run is tried again', async () => {
      const calls: string[] = [];
      let failNext = false;
      const counting = {
        channel: { kind: 'descriptors' } as const,
        async run(code: string, stdin: string) {
          calls.push(`${code}|${stdin}`);
          await new Promise((resolve) => setTimeout(resolve, 5));
          if (failNext) {
            failNext = false;
            throw new Error('sandbox down');
          }
          if (code === 'slow') return { finished: false, stdout: '', status: 'timeout' };
          if (code === 'loud') return { finished: true, stdout: 'x'.repeat(100_000), status: 'finished' };
          return { finished: true, stdout: `${code}:${stdin}`, status: 'finished' };
        },
      };
      const reused = new ReusedRuns(counting, 2);
      const first = await Promise.all([reused.run('a', '1'), reused.run('a', '1'), reused.run('a', '2'), reused.run('b', '1')]);
      expect(first.map((r) => r.stdout)).to.deep.equal(['a:1', 'a:1', 'a:2', 'b:1']);
      expect(calls).to.deep.equal(['a|1', 'a|2', 'b|1']);
      // Capacity 2: 'a|1' was evicted, 'b|1' (the newest) is still known.
      await reused.run('b', '1');
      await reused.run('a', '1');
      expect(calls).to.deep.equal(['a|1', 'a|2', 'b|1', 'a|1']);
      failNext = true;
      let error: Error | undefined;
      await reused.run('c', '1').catch((e: Error) => (error = e));
      expect(error?.message).to.equal('sandbox down');
      expect((await reused.run('c', '1')).stdout).to.equal('c:1');
      expect(calls.filter((c) => c === 'c|1')).to.have.length(2);
      // A timeout (perhaps a busy machine) and a long output are not kept.
      for (const code of ['slow', 'slow', 'loud', 'loud']) await reused.run(code, '1');
      expect(calls.filter((c) => c === 'slow|1' || c === 'loud|1')).to.have.length(4);
    });
  });

  describe('one response cannot stall, stop or fake its way through the host side of scoring', () => {
    // A sleeper beside the comparison: how late it fires is how long the event loop was held.
    async function heldFor(work: () => unknown): Promise<number> {
      const started = performance.now();
      let fired = 0;
      const timer = setTimeout(() => (fired = performance.now()), 0);
      work();
      await new Promise((resolve) => setTimeout(resolve, 1));
      clearTimeout(timer);
      return (fired || performance.now()) - started;
    }

    it('comparisons are linear in the output: a 1 MiB run of inner whitespace, 100,000-key dicts (the old strip took 42 s for 40 KB)', async () => {
      const spaces = 'x' + ' '.repeat(1 << 20) + 'x\n';
      let same = true;
      // Hours before (the square of the run); a generous bound that only a hang exceeds.
      expect(await heldFor(() => (same = sameOutput(spaces, 'x x\n') || sameOutput(spaces + '\t'.repeat(1 << 20), '1\n')))).to.be.below(10_000);
      expect(same).to.equal(false);
      const dict = (n: number, shift = 0): PyValue => ({ d: Array.from({ length: n }, (_, i) => [{ i: String((i + shift) % n) }, { s: `v${(i + shift) % n}` }] as [PyValue, PyValue]) });
      let equal = false;
      expect(await heldFor(() => (equal = sameCallResult(dict(100_000), dict(100_000, 7))))).to.be.below(10_000);
      expect(equal, 'the same dict in another order').to.equal(true);
      // Million-digit integers compared as text (BigInt took seconds), a million Arabic-Indic digits read once per digit kind.
      const digits = '7'.repeat(1_000_000);
      let integers: boolean[] = [];
      expect(await heldFor(() => (integers = [sameOutput(`${digits}\n`, `+${digits}\n`), sameOutput(`1${digits}`, `2${digits}`), asciiDigits('٣'.repeat(1_000_000)) === '3'.repeat(1_000_000)]))).to.be.below(10_000);
      expect(integers).to.deep.equal([true, false, true]);
      // Keys equal as Python hashes them: 1 == 1.0 == True; nan equals nothing; a key repeated (as no dict holds it) matches nothing.
      expect(sameCallResult({ d: [[{ f: '1.0' }, { s: 'a' }], [{ s: '2' }, null]] }, { d: [[true, { s: 'a' }], [{ s: '2' }, null]] })).to.equal(true);
      expect(sameCallResult({ d: [[{ i: '1' }, { s: 'a' }], [{ f: '1.0' }, { s: 'a' }]] }, { d: [[{ i: '1' }, { s: 'a' }], [{ i: '2' }, { s: 'b' }]] })).to.equal(false);
      expect(sameCallResult({ d: [[{ f: 'nan' }, { i: '1' }]] }, { d: [[{ f: 'nan' }, { i: '1' }]] })).to.equal(false);
      expect(sameCallResult({ d: [[{ s: '1' }, null]] }, { d: [[{ i: '1' }, null]] })).to.equal(false);
    });

    it('scoring one response never stalls the event loop at the 1 MiB output limit: a 100,000-key dict, nested lists, 500,000 lines of non-ASCII, 100,000 floats (large runs are judged on a thread)', async () => {
      const big = new SandboxRunner(new Sandbox({ limits: { outputBytes: 1 << 20 }, concurrency: 2 }));
      const many = 100_000;
      const cases: [string, unknown][] = [
        [`def f(x):\n    return {i: "v" + str(i) for i in range(${many})}`, { inputs: ['1'], outputs: ['{"1": "v1"}'], fn_name: 'f' }],
        ['def f(x):\n    return [[i, [str(i)]] for i in range(60000)]', { inputs: ['1'], outputs: ['[1]'], fn_name: 'f' }],
        ['print("é\\n" * 500000)', { inputs: ['\n'], outputs: ['x\n'] }],
        [`print("\\n".join(str(i * 1.5) for i in range(${many})))`, { inputs: ['\n'], outputs: [Array.from({ length: many }, (_, i) => (i * 1.5).toFixed(1)).join('\n')] }],
        [`def f(x):\n    return {i: "v" + str(i) for i in range(${many})}`, { assert_case: ['assert f(1) == {1: "v1"}'] }],
      ];
      // The event loop's longest stretch of work between two ticks of a 2 ms timer, as event-loop
      // utilisation counts it (time the process waited for a core while idle is not work), while one
      // response is scored; each response's best of three rounds. These inputs once held it 13-42 s;
      // measured now 37-131 ms (docs/code-rewards.md), the bound guards against such stalls with room
      // for a loaded, slow machine (a core taken away mid-work still counts).
      const BOUND_MS = 400;
      const stretches: number[] = [];
      const scores: number[] = [];
      for (const [program, truth] of cases) {
        const rounds: number[] = [];
        for (let round = 0; round < 3 && !(rounds.length && Math.min(...rounds) < BOUND_MS); round++) {
          let longest = 0;
          let last = performance.eventLoopUtilization();
          const ticker = setInterval(() => {
            const now = performance.eventLoopUtilization();
            longest = Math.max(longest, now.active - last.active);
            last = now;
          }, 2);
          try {
            const score = scoreValue(await scoreCode(big, '```python\n' + program + '\n```', truth, 'prime_code')).score;
            if (round === 0) scores.push(score);
          } finally {
            clearInterval(ticker);
          }
          rounds.push(longest);
        }
        stretches.push(Math.min(...rounds));
      }
      expect(scores).to.deep.equal([0, 0, 0, 1, 0]);
      expect(Math.max(...stretches), `the longest stretch the event loop was held, ms (per response, best of up to three rounds: ${stretches.map(Math.round).join(', ')})`).to.be.below(BOUND_MS);
      // The thread judges as this thread would, a malformed record's kind kept.
      const report = JSON.stringify({ done: true, results: [{ output: { l: Array.from({ length: 20_000 }, (_, i) => ({ i: String(i) })) } }] });
      expect(report.length).to.be.above(JUDGE_HERE_MAX);
      const run = { finished: true, report, stdout: '', mode: { kind: 'call', fnName: 'f' } as const, execution: 'prime_code' as const, expected: [JSON.stringify(Array.from({ length: 20_000 }, (_, i) => i)), '[1]'] };
      expect(await judgeRun(run)).to.deep.equal(judgeRunHere(run)).and.deep.equal([true, false]);
      let kind: string | undefined;
      await judgeRun({ ...run, report: report.replace('"done":true', '"done":true,"forged":1') }).catch((e: ScoringError) => (kind = e.kind));
      expect(kind).to.equal('malformed_report');
    });

    it('a descriptor the trainer inherited without close-on-exec is not open inside a run', async () => {
      // A child trainer that inherits fd 9 (a pipe, as a launcher might leave one) runs a program listing its descriptors.
      const script = "import { Sandbox } from './core-adapters/rewards/sandbox.ts'; const r = await new Sandbox().run('python', 'import os\\nprint(sorted(int(fd) for fd in os.listdir(\\'/proc/self/fd\\')))', '', { report: true }); console.log(r.stdout.trim());";
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe', 'ignore', 'ignore', 'ignore', 'ignore', 'ignore', 'ignore', 'pipe'] });
      let out = '';
      child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
      const status = await new Promise<number | null>((resolve) => child.on('close', resolve));
      expect(status, out).to.equal(0);
      const open = JSON.parse(out.trim().split('\n').at(-1)!) as number[];
      // 0-2, the report's 4 and 5, and the listing's own descriptor (python opens one to read the directory).
      expect(open.filter((fd) => fd !== 3 && fd > 5), out).to.deep.equal([]);
      expect(open).to.include.members([0, 1, 2, 4, 5]);
    });

    it("the output limit counts the program's bytes, not the report's escapes: 60 KB of non-ASCII (180 KB escaped) passes under 64 KiB; 70 KB does not", async () => {
      // prime_code captures a standard-input program's output and reports it escaped (\\u00e9: 6 bytes for 2).
      const accents = { inputs: ['\n'], outputs: ['é'.repeat(30_000) + '\n'] };
      expect((await score(runner, 'print("é" * 30000)', accents)).score).to.equal(1);
      const long = { inputs: ['\n'], outputs: ['x'.repeat(70_000) + '\n'] };
      expect((await score(runner, 'print("x" * 70000)', long)).score).to.equal(0);
    });

    it("expected results stay on the host: json.loads's reading of them (ints exact, NaN, repeated keys, prime_code's int keys), and the sandbox's stdin holds inputs only", () => {
      expect(pyJsonLoads('[1, 1.0, -0, 1e2, 123456789012345678901234567890, NaN, -Infinity, "a\\u00e9\\ud800", null, true, {}]')).to.deep.equal({
        l: [{ i: '1' }, { f: '1.0' }, { i: '-0' }, { f: '1e2' }, { i: '123456789012345678901234567890' }, { f: 'nan' }, { f: '-inf' }, { s: 'a\u00e9\ud800' }, null, true, { d: [] }],
      });
      expect(pyJsonLoads('{"a": 1, "b": 2, "a": 3}')).to.deep.equal({ d: [[{ s: 'a' }, { i: '3' }], [{ s: 'b' }, { i: '2' }]] });
      for (const bad of ['[1,]', '01', '"\t"', '{"a" 1}', '1 2', "'a'", '[' .repeat(1000) + ']'.repeat(1000), '9'.repeat(4301)]) expect(pyJsonLoads(bad), bad.slice(0, 20)).to.equal(undefined);
      expect(pyJsonLoads('-' + '9'.repeat(4300))).to.deep.equal({ i: '-' + '9'.repeat(4300) });
      expect(expectedCallResult('{"' + '1'.repeat(4301) + '": 1}')).to.deep.equal({ d: [[{ s: '1'.repeat(4301) }, { i: '1' }]] });
      // A dict whose keys all read as ints becomes [that dict with int keys]; so does a list's first dict.
      expect(expectedCallResult('{" 1_0 ": "x", "2": "y"}')).to.deep.equal({ l: [{ d: [[{ i: '10' }, { s: 'x' }], [{ i: '2' }, { s: 'y' }]] }] });
      expect(expectedCallResult('[{"3": 1}, 7]')).to.deep.equal({ l: [{ d: [[{ i: '3' }, { i: '1' }]] }] });
      expect(expectedCallResult('{"a": 1}')).to.deep.equal({ d: [[{ s: 'a' }, { i: '1' }]] });
      const stdin = JSON.parse(harnessInput({ kind: 'call', fnName: 'f' }, 'prime_code', [{ input: '1', expected: '42' }])) as { tests: object[] };
      expect(stdin.tests).to.deep.equal([{ input: '1' }]);
      expect(harnessInput({ kind: 'stdin' }, 'prime_code', [{ input: '5\n', expected: 'secret' }])).to.not.include('secret');
    });

    it('a harness report not of the exact shape is malformed_report: wrong types, unknown fields, 30,000-deep values, an int longer than Python prints, not JSON', () => {
      const valid = '{"done": true, "results": [{"output": {"l": [{"i": "-3"}, {"f": "1.5"}, {"t": []}, {"d": [[{"s": "k"}, null]]}, true]}}, {"error": "boom"}]}';
      expect(readHarnessRecord(valid)?.results).to.have.length(2);
      expect(readHarnessRecord(undefined)).to.equal(undefined);
      const deep = '{"l": ['.repeat(30_000) + ']}'.repeat(30_000);
      const malformed = [
        '{"done": true, "results": [{"output": {"s": 5}}]}',
        '{"done": true, "results": [{"output": {"i": "1"}, "expected": {"i": "1"}}]}',
        '{"done": "yes"}',
        '{"done": true, "score": 1}',
        '{"done": true, "results": [{"output": {"s": "a", "i": "1"}}]}',
        '{"done": true, "results": [{"output": {"i": "1e5"}}]}',
        `{"done": true, "results": [{"output": {"i": "${'9'.repeat(5000)}"}}]}`,
        `{"done": true, "results": [{"output": ${deep}}]}`,
        '{"done": true, "results": [{"output": {"d": [[{"s": "k"}]]}}]}',
        '{"done": true, "results": [{"output": {"d": [[{"t": [{"s": "k"}]}, null]]}}]}',
        '{"done": true, "results": {"0": {}}}',
        '{"done": true',
        '[]',
      ];
      for (const report of malformed) {
        let kind: string | undefined;
        try {
          readHarnessRecord(report);
        } catch (e) {
          kind = (e as ScoringError).kind;
        }
        expect(kind, report.slice(0, 80)).to.equal('malformed_report');
      }
    });

    it('a program that writes its own record of the wrong shape scores 0 as malformed_report; an exception in a scorer scores 0 as exception; a missing sandbox still stops', async () => {
      const sq = { assert_case: ['assert sq(3) == 9'] };
      const scorer = (text: string, truth: unknown) => scoreCode(runner, text, truth, 'fraction');
      expect(await scoreResponse(scorer, 'def sq(x):\n    return x * x', sq, {}, 'apps')).to.deep.equal({ score: 1, extras: { acc: true, passed_fraction: 1 } });
      // The harness's own secret and descriptor, read from its frame, with a record of the wrong shape.
      const forger = 'def sq(x):\n    return 0\nimport sys, os\nf = sys._getframe(1)\nos.write(f.f_locals["fd"], f.f_locals["head"] + b"\\n" + b\'{"done": true, "results": [{"output": {"s": 5}}]}\')\nos._exit(0)';
      const forged = await scoreResponse(scorer, forger, sq, {}, 'apps');
      expect(forged.score).to.equal(0);
      expect(forged.error?.kind).to.equal('malformed_report');
      const thrower = await scoreResponse(() => (null as unknown as string).split('').length, 'x', 1, {}, 'custom');
      expect(thrower).to.deep.include({ score: 0 });
      expect(thrower.error).to.deep.equal({ kind: 'exception', message: "TypeError: Cannot read properties of null (reading 'split')" });
      let stopped: unknown;
      await scoreResponse(() => Promise.reject(new ScorerUnavailable('the code sandbox failed to start: no bwrap')), 'x', 1, {}, 'apps').catch((e: unknown) => (stopped = e));
      expect(stopped).to.be.instanceOf(ScorerUnavailable);
    });

    it('flowrl reward over attacks mixed with correct programs: the correct ones 1, the rest 0 with their reasons, exit 0', async () => {
      const dir = tempDir('flowrl-reward-');
      const rows = path.join(dir, 'rows.jsonl');
      const responses = path.join(dir, 'responses.jsonl');
      const row = (truth: unknown) => JSON.stringify({ data_source: 'apps', prompt: [{ role: 'user', content: 'x' }], reward_model: { ground_truth: truth } });
      const double = { inputs: ['2\n', '5\n'], outputs: ['4\n', '10\n'] };
      const add = JSON.stringify({ fn_name: 'add', inputs: ['1\n2'], outputs: ['3'] });
      const cases: [unknown, string, number, string?][] = [
        [double, 'n = int(input())\nprint(2 * n)', 1],
        [double, 'print("x" + " " * 40000 + "x")', 0],
        [{ inputs: ['1\n'], outputs: ['-1000000007\n'] }, 'print(-1000000000.0)', 0],
        [add, 'def add(a, b):\n    return a + b', 1],
        [add, 'class Any:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Any()', 0],
        [{ assert_case: ['assert sq(3) == 9'] }, 'def sq(x):\n    return 0\nimport sys, os\nf = sys._getframe(1)\nos.write(f.f_locals["fd"], f.f_locals["head"] + b"\\n" + b\'{"done": true, "hacked": 1}\')\nos._exit(0)', 0, 'malformed_report'],
        [{ assert_case: ['assert sq(3) == 9'] }, 'def sq(x):\n    return x * x', 1],
      ];
      fs.writeFileSync(rows, cases.map(([truth]) => row(truth)).join('\n') + '\n');
      fs.writeFileSync(responses, cases.map(([, response]) => JSON.stringify({ response })).join('\n') + '\n');
      const run = await runBuiltFlowrl(['reward', rows, '--responses', responses, '--json']);
      expect(run.status, run.stderr).to.equal(0);
      const scored = run.stdout.trim().split('\n').map((l) => JSON.parse(l) as { score: number; error?: string });
      expect(scored.map((s) => s.score)).to.deep.equal(cases.map(([, , expected]) => expected));
      expect(scored.map((s) => s.error)).to.deep.equal(cases.map(([, , , error]) => error));
      const table = await runBuiltFlowrl(['reward', rows, '--responses', responses]);
      expect(table.status, table.stderr).to.equal(0);
      expect(table.stdout).to.include('7 responses, mean score 0.4286; 1 scored 0 because scoring failed (first, row 6: malformed_report: ScoringError: the harness report is not a record: unknown field \'hacked\')');
    });
  });

  describe('flowrl reward', () => {
    /** Runs the command in this process, returning what it printed. */
    async function reward(args: string[]): Promise<string> {
      const lines: string[] = [];
      const log = console.log;
      console.log = (...parts: unknown[]) => void lines.push(parts.join(' '));
      try {
        await rewardCommand(args);
      } finally {
        console.log = log;
      }
      return lines.join('\n');
    }

    it('scores each response against its row (code, countdown), prints JSON with --json, and names a malformed row with exit 2', async () => {
      const dir = tempDir('flowrl-reward-');
      const rows = path.join(dir, 'rows.jsonl');
      const responses = path.join(dir, 'responses.jsonl');
      const row = (dataSource: string, truth: unknown) => JSON.stringify({ data_source: dataSource, prompt: [{ role: 'user', content: 'x' }], reward_model: { ground_truth: truth } });
      const write = (file: string, lines: string[]) => fs.writeFileSync(file, lines.join('\n') + '\n');
      const answers = (texts: string[]) => texts.map((r) => JSON.stringify({ response: r }));
      write(rows, [row('apps', { inputs: ['2\n', '5\n'], outputs: ['4\n', '25\n'] }), row('taco', JSON.stringify({ fn_name: 'f', inputs: ['3'], outputs: ['6'] })), row('countdown', { numbers: [3, 4], target: 7 })]);
      write(responses, answers(['```python\nn = int(input())\nprint(n + n)\n```', 'def f(x):\n    return 2 * x', '<answer>3*4</answer>']));
      const scored = (await reward([rows, '--responses', responses, '--json'])).split('\n').map((l) => JSON.parse(l) as { row: number; score: number });
      expect(scored.map((s) => [s.row, s.score])).to.deep.equal([[1, 0.5], [2, 1], [3, 0]]);
      expect(await reward([rows, '--responses', responses, 'reward_model.code.score=all'])).to.include('3 responses, mean score 0.3333');
      write(responses, answers(['print(1)']));
      await expectInputErrorAsync(reward([rows, '--responses', responses]), '1 responses for 3 rows');
      write(rows, [row('no-such-task', {})]);
      await expectInputErrorAsync(reward([rows, '--responses', responses]), `${rows} row 1: no scorer for data_source 'no-such-task'`);
      // From the command line: a malformed test specification is exit 2 naming the file and row.
      write(rows, [row('apps', { inputs: ['1'], outputs: ['1'] }), row('apps', { inputs: ['1', '2'], outputs: ['1'] })]);
      write(responses, answers(['print(1)', 'print(1)']));
      const bad = await runBuiltFlowrl(['reward', rows, '--responses', responses]);
      expect(bad.status).to.equal(2);
      expect(bad.stderr).to.include(`${rows} row 2: reward_model.ground_truth has 2 inputs but 1 outputs`);
    });

    it("the code example's rows: each solver program passes its row's tests, and a program that misses a shown pair fails", async () => {
      const dir = tempDir('flowrl-reward-');
      const example = path.join(ROOT, 'examples', 'code', 'data', 'val.jsonl');
      const rows = fs.readFileSync(example, 'utf8').split('\n').filter(Boolean).slice(0, 12);
      const file = path.join(dir, 'rows.jsonl');
      fs.writeFileSync(file, rows.join('\n') + '\n');
      const responses = path.join(dir, 'responses.jsonl');
      const solutions = rows.map((line) => (JSON.parse(line) as { extra_info: { response: string } }).extra_info.response);
      fs.writeFileSync(responses, solutions.map((response) => JSON.stringify({ response })).join('\n') + '\n');
      const scores = (await reward([file, '--responses', responses, '--json'])).split('\n').map((l) => (JSON.parse(l) as { score: number }).score);
      expect(scores).to.deep.equal(rows.map(() => 1));
      // The identity passes no row whose shown pairs change their list (the assert holds them too).
      fs.writeFileSync(responses, rows.map(() => JSON.stringify({ response: 'def f(x):return x' })).join('\n') + '\n');
      const identity = (await reward([file, '--responses', responses, '--json'])).split('\n').map((l) => (JSON.parse(l) as { score: number }).score);
      const keepsLists = rows.map((line) => {
        const prompt = (JSON.parse(line) as { prompt: { content: string }[] }).prompt[0].content;
        return prompt.slice(0, -1).split(';').every((pair) => pair.split('>')[0] === pair.split('>')[1]);
      });
      identity.forEach((score, i) => expect(score, `row ${i + 1}`).to.be.at.most(keepsLists[i] ? 1 : 0));
      expect(identity.filter((score) => score === 0).length).to.be.greaterThan(6);
    });
  });
});

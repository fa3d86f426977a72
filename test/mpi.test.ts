// Data-parallel ranks over MPI (issue 36): the MPI addon's collectives under mpirun with two ranks
// on loopback, a rank that stops answering (every rank ends, bounded), and a launcher without the addon.
import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { coresForThisRank, launchedRanks, mpiAddonPath, rankWorld, SINGLE_RANK } from '../core-adapters/engine/mpi.js';
import { createHost, TOKENS, type RLTrainer } from '../core-adapters/index.js';
import { readTensors } from '../core-adapters/model/safetensors.js';
import { gatherValues, mergeRowMetrics } from '../core-adapters/workers/ranks.js';
import { BUILT_CLI, expectFreshDist, expectInputError, enginePaths, expectInputErrorAsync, readRunMetrics, ROOT, runBuiltFlowrl, tempDir, withoutTiming, writeCountdownConfig } from './helpers.js';

const hasMpirun = spawnSync('sh', ['-c', 'command -v mpirun'], { stdio: 'ignore' }).status === 0;
const COLLECTIVES = path.join(import.meta.dirname, 'fixtures', 'mpi', 'collectives.ts');

/** What every mpirun here runs with: root allowed (as CI runs), TCP between the ranks. */
const MPI_ENV = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1', OMPI_MCA_btl: 'self,tcp' };

/** `mpirun -np N node ...nodeArgs` (root allowed, as CI runs), with `env` added. */
function mpirun(ranks: number, nodeArgs: string[], env: Record<string, string> = {}, timeoutMs = 90_000) {
  const started = Date.now();
  const result = spawnSync('mpirun', ['-np', String(ranks), '--oversubscribe', process.execPath, ...nodeArgs], {
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...MPI_ENV, ...env },
  });
  return { ...result, seconds: (Date.now() - started) / 1000 };
}

/** Two ranks training `config` under mpirun in the background, once its first step is logged in `runDir`. */
/**
 * mpirun started as docs/data-parallel.md says, from a project whose node_modules/.bin/flowrl is the
 * installed command (here a link to this checkout's bin/flowrl.js): the ranks are node itself, so
 * mpirun's SIGUSR1 reaches them (through npx it would reach npm, which dies of it).
 */
async function trainingStarted(config: string, runDir: string) {
  const project = tempDir();
  fs.mkdirSync(path.join(project, 'node_modules', '.bin'), { recursive: true });
  fs.symlinkSync(path.join(ROOT, 'bin', 'flowrl.js'), path.join(project, 'node_modules', '.bin', 'flowrl'));
  expectFreshDist();
  const job = spawn('mpirun', ['-np', '2', '--oversubscribe', 'node_modules/.bin/flowrl', 'train', config], { cwd: project, env: { ...MPI_ENV, PATH: `${path.dirname(process.execPath)}:${process.env.PATH}` }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  job.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => job.on('exit', (code) => resolve(code)));
  const metrics = path.join(runDir, 'metrics.jsonl');
  while (!(fs.existsSync(metrics) && fs.readFileSync(metrics, 'utf8').trim())) {
    if (job.exitCode !== null) throw new Error(`mpirun ended before a step was logged:\n${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return { job, exited, stderr: () => stderr };
}

describe('data-parallel ranks over MPI', function () {
  this.timeout(120_000);

  it('reads the number of ranks from the launcher (Open MPI, MPICH, PMIx), 1 outside one', () => {
    expect(launchedRanks({})).to.equal(1);
    expect(launchedRanks({ OMPI_COMM_WORLD_SIZE: '4' })).to.equal(4);
    expect(launchedRanks({ PMI_SIZE: '2' })).to.equal(2);
    expect(launchedRanks({ OMPI_COMM_WORLD_SIZE: 'x' })).to.equal(1);
  });

  it("shares the machine's cores among the ranks started on it (threads and sampling's product split), at least one each", () => {
    const cores = os.availableParallelism();
    expect(coresForThisRank({})).to.equal(cores);
    expect(coresForThisRank({ OMPI_COMM_WORLD_LOCAL_SIZE: '2' })).to.equal(Math.max(1, Math.floor(cores / 2)));
    expect(coresForThisRank({ MPI_LOCALNRANKS: String(cores * 4) })).to.equal(1);
  });

  it("merges the ranks' rollout metrics as the whole batch's: extremes for /min and /max, else means weighted by rows", () => {
    expect(mergeRowMetrics([{ 'num_turns/min': 2, 'num_turns/max': 5, 'num_turns/mean': 3 }, { 'num_turns/min': 1, 'num_turns/max': 4, 'num_turns/mean': 2 }], [3, 1])).to.deep.equal({ 'num_turns/min': 1, 'num_turns/max': 5, 'num_turns/mean': 2.75 });
    expect(mergeRowMetrics([{ a: 1 }, undefined], [2, 2])).to.deep.equal({ a: 1 });
    // One process: gathers return its own value, NaN and typed arrays intact.
    expect(gatherValues(SINGLE_RANK, { loss: NaN, rows: Float32Array.of(1, 2) })).to.deep.equal([{ loss: NaN, rows: Float32Array.of(1, 2) }]);
  });

  it('a launch of several ranks without the MPI addon, or with one that does not load, stops with one message naming the addon and what to do', () => {
    const saved = process.env.FLOWRL_MPI_ADDON;
    process.env.FLOWRL_MPI_ADDON = '/nonexistent/flowrl_mpi.node';
    try {
      expectInputError(() => rankWorld(10, { OMPI_COMM_WORLD_SIZE: '2' }), 'one of 2 ranks', '/nonexistent/flowrl_mpi.node', 'libopenmpi-dev');
      // One that exists but does not load (built elsewhere, damaged): one line, not a stack trace.
      const broken = path.join(tempDir(), 'flowrl_mpi.node');
      fs.writeFileSync(broken, 'not a shared object');
      process.env.FLOWRL_MPI_ADDON = broken;
      const error = expectInputError(() => rankWorld(10, { OMPI_COMM_WORLD_SIZE: '2' }), 'one of 2 ranks', `MPI addon (${broken}) does not load`, 'rebuild it on this machine');
      expect(error.message.split('\n')).to.have.length(1);
    } finally {
      if (saved === undefined) delete process.env.FLOWRL_MPI_ADDON;
      else process.env.FLOWRL_MPI_ADDON = saved;
    }
  });

  it('ranks refuse rollout servers (every rank would push weights; one step off would interleave their gathers)', async () => {
    const host = await createHost(writeCountdownConfig(tempDir(), { actor_rollout_ref: { rollout: { name: 'vllm', server: { urls: ['http://127.0.0.1:9'] } } } }), { skipEngine: true });
    host.container.unbind(TOKENS.Ranks);
    host.container.bind(TOKENS.Ranks).toConstantValue({ ...SINGLE_RANK, size: 2 });
    await expectInputErrorAsync(host.container.get<RLTrainer>(TOKENS.Trainer).setup(), 'actor_rollout_ref.rollout.name vllm: data-parallel ranks (mpirun) sample on the ranks themselves');
  });

  describe('under mpirun with two ranks', function () {
    before(function () {
      const why = !hasMpirun ? 'Open MPI is not installed (npm test installs openmpi-bin and libopenmpi-dev where it can)' : !fs.existsSync(mpiAddonPath()) ? `the MPI addon is not built (${mpiAddonPath()}; it needs mpicc at install)` : undefined;
      if (why) {
        console.warn(`    skipped, two ranks under mpirun: ${why}`);
        this.skip();
      }
      expectFreshDist(); // the ranks run the built command
    });

    it('sums float32 and float64 buffers in place, gathers uneven bytes in rank order, and meets at a barrier', () => {
      const run = mpirun(2, ['--import', 'tsx', COLLECTIVES]);
      expect(run.status, run.stderr).to.equal(0);
      const lines = run.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { rank: number; size: number; single: number[]; double: number[]; gathered: string[] });
      expect(lines.map((l) => l.rank).sort()).to.deep.equal([0, 1]);
      for (const line of lines) {
        expect(line.size).to.equal(2);
        expect(line.single).to.deep.equal([3, 0.25, -1]);
        expect(line.double[0]).to.be.closeTo(3e-12, 1e-24);
        expect(line.double[1]).to.equal(6);
        expect(line.gathered).to.deep.equal(['rank 0', 'rank 1!']);
        // libnbc's ring all-reduce, chosen before MPI_Init (its default in place is a binomial tree).
        expect((line as { allreduce?: string }).allreduce).to.equal('1');
      }
    });

    /**
     * One config run twice: as one process with two threads, and as two ranks with one thread each
     * (each of the process's micro-batches is split the same way in both: halves whose gradients are
     * summed). Returns both run directories and the ranks' output.
     */
    async function twoWays(extra: Record<string, unknown>, steps: number) {
      const dir = tempDir();
      const config = (name: string, workers: number) =>
        writeCountdownConfig(path.join(dir, name), { trainer: { total_training_steps: steps, test_freq: 0, save_freq: 0, val_before_train: false, default_local_dir: path.join(dir, name, 'run') }, engine: { workers }, ...extra });
      for (const name of ['threads', 'ranks']) fs.mkdirSync(path.join(dir, name));
      const threads = await runBuiltFlowrl(['train', config('threads', 2)], 240_000);
      expect(threads.status, threads.stderr).to.equal(0);
      const ranks = mpirun(2, [BUILT_CLI, 'train', config('ranks', 1)], {}, 240_000);
      expect(ranks.status, ranks.stderr).to.equal(0);
      return { threads: path.join(dir, 'threads', 'run'), ranks: path.join(dir, 'ranks', 'run'), output: ranks };
    }

    /** Every saved tensor of `file` in both runs' last checkpoints, to `tolerance`. */
    function expectSameWeights(runs: { threads: string; ranks: string }, steps: number, file: string, tolerance: number) {
      const read = (run: string) => readTensors(path.join(run, 'checkpoints', `global_step_${steps}`, file));
      const [a, b] = [read(runs.threads), read(runs.ranks)];
      expect([...b.keys()]).to.deep.equal([...a.keys()]);
      let worst = 0;
      for (const [name, t] of a) t.data.forEach((v, i) => (worst = Math.max(worst, Math.abs(v - b.get(name)!.data[i]))));
      expect(worst, `largest difference in ${file}`).to.be.below(tolerance);
    }

    /** The same metrics at every step (sampling, rewards, losses, norms), timing aside. */
    function expectSameMetrics(runs: { threads: string; ranks: string }) {
      const [a, b] = [readRunMetrics(runs.threads), readRunMetrics(runs.ranks)];
      expect(b.map((m) => m.step)).to.deep.equal(a.map((m) => m.step));
      a.forEach((metrics, i) => {
        const other = withoutTiming(b[i]);
        for (const [key, value] of Object.entries(withoutTiming(metrics))) expect(other[key], `step ${metrics.step} ${key}`).to.be.closeTo(value, 1e-5 * Math.max(1, Math.abs(value)));
      });
    }

    it('GRPO: two ranks train the parameters one process does from the same global batch; rank 0 alone writes the run', async () => {
      const runs = await twoWays({ actor_rollout_ref: { actor: { ppo_mini_batch_size: 4, ppo_micro_batch_size: 16 } } }, 2);
      expectSameMetrics(runs);
      expectSameWeights(runs, 2, 'actor/model.safetensors', 1e-5);
      // One writer: one line a step, one checkpoint, one banner.
      expect(readRunMetrics(runs.ranks)).to.have.length(2);
      expect(fs.readdirSync(path.join(runs.ranks, 'checkpoints')).filter((d) => d.startsWith('global_step_'))).to.deep.equal(['global_step_2']);
      expect(runs.output.stderr.match(/data-parallel ranks: 2/g)).to.have.length(1);
      // Said once for the job, by rank 0: the engine's banner too.
      expect(runs.output.stderr.match(/\[flowrl\] tfjs backend:/g)).to.have.length(1);
      // The sums' time is logged beside the update's, only where there is a sum.
      expect(readRunMetrics(runs.ranks)[0]['timing_s/actor_rank_sum']).to.be.above(0);
      expect(readRunMetrics(runs.threads)[0]).not.to.have.property('timing_s/actor_rank_sum');
    });

    it('PPO with a critic and LoRA adapters: the same critic and adapters as one process', async () => {
      const runs = await twoWays({ algorithm: { name: 'ppo' }, actor_rollout_ref: { model: { lora_rank: 4 } } }, 1);
      expectSameMetrics(runs);
      expectSameWeights(runs, 1, 'actor/adapter_model.safetensors', 1e-5);
      expectSameWeights(runs, 1, 'critic/model.safetensors', 1e-5);
    });

    it("FlowRL: the same policy and log Z head (ProjZ) as one process", async () => {
      const runs = await twoWays({ plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'flowrl' } }, 1);
      expectSameMetrics(runs);
      expectSameWeights(runs, 1, 'actor/model.safetensors', 1e-5);
      const heads = fs.readdirSync(path.join(runs.ranks, 'checkpoints', 'global_step_1', 'actor')).filter((f) => f.endsWith('.safetensors') && f !== 'model.safetensors');
      expect(heads).to.have.length.above(0);
      for (const head of heads) expectSameWeights(runs, 1, `actor/${head}`, 1e-5);
    });

    it('ranks whose configs differ stop with one message naming the key', () => {
      const dir = tempDir();
      const config = writeCountdownConfig(dir, { trainer: { total_training_steps: 1 } });
      // mpirun's colon syntax: rank 1 is started with another seed.
      const run = spawnSync('mpirun', ['-np', '1', '--oversubscribe', process.execPath, BUILT_CLI, 'train', config, ':', '-np', '1', process.execPath, BUILT_CLI, 'train', config, 'trainer.seed=4'], {
        encoding: 'utf8',
        timeout: 120_000,
        env: MPI_ENV,
      });
      expect(run.status).to.not.equal(0);
      expect(run.stderr.match(/rank 1's config differs from rank 0's at trainer\.seed \(rank 0: 3, rank 1: 4\); every rank must run the same command/g)).to.have.length(1);
    });

    it('ranks on different engine paths (one without the native addon) stop with one message naming what differs', function () {
      // Rank 0 needs the addon for the paths to differ (FLOWRL_NATIVE=off here, or no addon built).
      if (!enginePaths().includes('native-loop')) this.skip();
      const dir = tempDir();
      const config = writeCountdownConfig(dir, { trainer: { total_training_steps: 1 } });
      const run = spawnSync('mpirun', ['-np', '1', '--oversubscribe', process.execPath, BUILT_CLI, 'train', config, ':', '-np', '1', 'env', 'FLOWRL_NATIVE=off', process.execPath, BUILT_CLI, 'train', config], {
        encoding: 'utf8',
        timeout: 120_000,
        env: MPI_ENV,
      });
      expect(run.status).to.not.equal(0);
      expect(run.stderr.match(/rank 1's engine path differs from rank 0's at kernels/g), run.stderr).to.have.length(1);
      expect(run.stderr).to.include('every rank must compute the same way');
    });

    it('a run directory the ranks do not share stops the fresh run at once with one message naming the rank and host', function () {
      // Rank 1 in its own mount namespace with an empty tmpfs over the run directory: a machine that lacks rank 0's files.
      if (process.getuid?.() !== 0 || spawnSync('unshare', ['--version']).status !== 0) this.skip();
      const dir = tempDir();
      const config = writeCountdownConfig(dir, { trainer: { total_training_steps: 1 } });
      const runDir = path.join(dir, 'run');
      fs.mkdirSync(runDir);
      const blind = `mount -t tmpfs tmpfs ${JSON.stringify(runDir)} && exec ${JSON.stringify(process.execPath)} ${JSON.stringify(BUILT_CLI)} train ${JSON.stringify(config)}`;
      const run = spawnSync('mpirun', ['-np', '1', '--oversubscribe', process.execPath, BUILT_CLI, 'train', config, ':', '-np', '1', 'unshare', '-m', '--propagation', 'private', 'sh', '-c', blind], {
        encoding: 'utf8',
        timeout: 120_000,
        env: MPI_ENV,
      });
      expect(run.status).to.not.equal(0);
      expect(run.stderr.match(/is not shared by the ranks: rank 1 on \S+ does not see the lock rank 0 took/g), run.stderr).to.have.length(1);
      expect(fs.existsSync(path.join(runDir, 'metrics.jsonl')), 'no step was trained').to.equal(false);
    });

    it('a rank that dies ends the job on every rank, bounded, and the same command resumes from rank 0\'s checkpoint', async () => {
      const dir = tempDir();
      const config = writeCountdownConfig(dir, { trainer: { total_training_steps: 4, test_freq: 0, save_freq: 1, val_before_train: false } });
      const { job, exited, stderr } = await trainingStarted(config, path.join(dir, 'run'));
      // Rank 1 (the second node process mpirun started) is killed.
      const ranks = spawnSync('pgrep', ['-P', String(job.pid)], { encoding: 'utf8' }).stdout.trim().split('\n').map(Number).sort((a, b) => a - b);
      expect(ranks).to.have.length(2);
      const killedAt = Date.now();
      process.kill(ranks[1], 'SIGKILL');
      const code = await exited;
      expect(code).to.not.equal(0);
      // mpirun can return while rank 0 is still ending (it holds the run's lock until then, and a
      // command started at once is told the run is in use): every rank must be gone, and soon.
      const alive = (pid: number) => {
        try {
          process.kill(pid, 0);
          return true;
        } catch {
          return false;
        }
      };
      while (ranks.some(alive) && Date.now() - killedAt < 30_000) await new Promise((r) => setTimeout(r, 100));
      expect(ranks.filter(alive), 'ranks still running').to.deep.equal([]);
      expect((Date.now() - killedAt) / 1000, 'every rank ended').to.be.below(30);
      expect(stderr()).to.match(/exited on signal 9|killed/i);
      const saved = fs.readdirSync(path.join(dir, 'run', 'checkpoints')).filter((d) => d.startsWith('global_step_'));
      expect(saved.length).to.be.at.least(1);
      const resumed = mpirun(2, [BUILT_CLI, 'train', config], {}, 240_000);
      expect(resumed.status, resumed.stderr).to.equal(0);
      expect(readRunMetrics(path.join(dir, 'run')).map((m) => m.step)).to.deep.equal([1, 2, 3, 4]);
    });

    it('SIGUSR1 to mpirun stops every rank after the same step with a checkpoint (SIGINT and SIGTERM would end the job at once); the same command resumes', async () => {
      const dir = tempDir();
      const config = writeCountdownConfig(dir, { trainer: { total_training_steps: 6, test_freq: 0, save_freq: 0, val_before_train: false } });
      const { job, exited, stderr } = await trainingStarted(config, path.join(dir, 'run'));
      job.kill('SIGUSR1');
      const code = await exited;
      expect(code, stderr()).to.not.equal(0);
      const stopped = /stopped by SIGUSR1 after step (\d+)/.exec(stderr());
      expect(stopped, stderr()).to.not.equal(null);
      const step = Number(stopped![1]);
      expect(step).to.be.below(6);
      expect(fs.readdirSync(path.join(dir, 'run', 'checkpoints'))).to.include(`global_step_${step}`);
      const resumed = mpirun(2, [BUILT_CLI, 'train', config], {}, 240_000);
      expect(resumed.status, resumed.stderr).to.equal(0);
      expect(readRunMetrics(path.join(dir, 'run')).map((m) => m.step)).to.deep.equal([1, 2, 3, 4, 5, 6]);
    });

    it('SIGTERM to mpirun ends the job at once, and rank 0 says so once, naming the stop that keeps a checkpoint', async () => {
      const dir = tempDir();
      const config = writeCountdownConfig(dir, { trainer: { total_training_steps: 50, test_freq: 0, save_freq: 0, val_before_train: false } });
      const { job, exited, stderr } = await trainingStarted(config, path.join(dir, 'run'));
      job.kill('SIGTERM');
      expect(await exited).to.not.equal(0);
      expect(stderr().match(/SIGTERM under mpirun: mpirun is ending the job now/g), stderr()).to.have.length(1);
      expect(stderr()).to.include('send mpirun SIGUSR1');
    });

    it('another command under mpirun stops with one message (only training splits over ranks)', () => {
      const run = mpirun(2, [BUILT_CLI, 'eval', writeCountdownConfig(tempDir())], {}, 60_000);
      expect(run.status).to.not.equal(0);
      expect(run.stderr).to.contain('only flowrl train runs as data-parallel ranks; run eval as one process');
    });

    it('a rank that stops answering ends every rank within the deadline, with a message naming the collective', () => {
      const run = mpirun(2, ['--import', 'tsx', COLLECTIVES], { STUCK_RANK: '1', TIMEOUT_S: '2' });
      expect(run.status).to.not.equal(0);
      expect(run.stderr).to.contain('[flowrl] rank 0: mpi: allreduce: another rank did not take part within 2 s; stopping every rank');
      expect(run.seconds).to.be.below(30);
    });
  });
});

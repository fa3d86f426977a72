// Data-parallel ranks over MPI (issue 36): the MPI addon's collectives under mpirun with two ranks
// on loopback, a rank that stops answering (every rank ends, bounded), and a launcher without the addon.
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { launchedRanks, mpiAddonPath, rankWorld } from '../core-adapters/engine/mpi.js';
import { expectInputError } from './helpers.js';

const hasMpirun = spawnSync('sh', ['-c', 'command -v mpirun'], { stdio: 'ignore' }).status === 0;
const COLLECTIVES = path.join(import.meta.dirname, 'fixtures', 'mpi', 'collectives.ts');

/** `mpirun -np N node --import tsx FILE` (root allowed, as CI runs), with `env` added. */
function mpirun(ranks: number, args: string[], env: Record<string, string> = {}, timeoutMs = 90_000) {
  const started = Date.now();
  const result = spawnSync('mpirun', ['-np', String(ranks), '--oversubscribe', process.execPath, '--import', 'tsx', ...args], {
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1', OMPI_MCA_btl: 'self,tcp', ...env },
  });
  return { ...result, seconds: (Date.now() - started) / 1000 };
}

describe('data-parallel ranks over MPI', function () {
  this.timeout(120_000);

  it('reads the number of ranks from the launcher (Open MPI, MPICH, PMIx), 1 outside one', () => {
    expect(launchedRanks({})).to.equal(1);
    expect(launchedRanks({ OMPI_COMM_WORLD_SIZE: '4' })).to.equal(4);
    expect(launchedRanks({ PMI_SIZE: '2' })).to.equal(2);
    expect(launchedRanks({ OMPI_COMM_WORLD_SIZE: 'x' })).to.equal(1);
  });

  it('a launch of several ranks without the MPI addon stops with one message naming the addon and how to build it', () => {
    const saved = process.env.FLOWRL_MPI_ADDON;
    process.env.FLOWRL_MPI_ADDON = '/nonexistent/flowrl_mpi.node';
    try {
      expectInputError(() => rankWorld(10, { OMPI_COMM_WORLD_SIZE: '2' }), 'one of 2 ranks', '/nonexistent/flowrl_mpi.node', 'libopenmpi-dev');
    } finally {
      if (saved === undefined) delete process.env.FLOWRL_MPI_ADDON;
      else process.env.FLOWRL_MPI_ADDON = saved;
    }
  });

  describe('under mpirun with two ranks', function () {
    before(function () {
      if (!hasMpirun) return this.skip(); // Open MPI is not installed (npm test installs openmpi-bin where it can)
      if (!fs.existsSync(mpiAddonPath())) return this.skip(); // the MPI addon is not built (no mpicc at install)
    });

    it('sums float32 and float64 buffers in place, gathers uneven bytes in rank order, and meets at a barrier', () => {
      const run = mpirun(2, [COLLECTIVES]);
      expect(run.status, run.stderr).to.equal(0);
      const lines = run.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { rank: number; size: number; single: number[]; double: number[]; gathered: string[] });
      expect(lines.map((l) => l.rank).sort()).to.deep.equal([0, 1]);
      for (const line of lines) {
        expect(line.size).to.equal(2);
        expect(line.single).to.deep.equal([3, 0.25, -1]);
        expect(line.double[0]).to.be.closeTo(3e-12, 1e-24);
        expect(line.double[1]).to.equal(6);
        expect(line.gathered).to.deep.equal(['rank 0', 'rank 1!']);
      }
    });

    it('a rank that stops answering ends every rank within the deadline, with a message naming the collective', () => {
      const run = mpirun(2, [COLLECTIVES], { STUCK_RANK: '1', TIMEOUT_S: '2' });
      expect(run.status).to.not.equal(0);
      expect(run.stderr).to.contain('[flowrl] rank 0: mpi: allreduce: another rank did not take part within 2 s; stopping every rank');
      expect(run.seconds).to.be.below(30);
    });
  });
});

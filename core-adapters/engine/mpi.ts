// Data-parallel ranks over MPI (issue 36): which rank this process is, and the collectives the
// ranks share, from the optional MPI addon (native/mpi, built where mpicc and mpi.h are). Each
// collective waits with a deadline: a rank that stops answering ends the job with one message on
// every rank (MPI_Abort), never a hang.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { InputError } from '../errors.js';
import { PACKAGE_ROOT } from '../package-root.js';

interface MpiAddon {
  init(): { rank: number; size: number };
  allreduceSum(values: Float32Array | Float64Array, timeoutMs: number): void;
  allgather(bytes: Uint8Array, timeoutMs: number): Uint8Array[];
  barrier(timeoutMs: number): void;
  abort(code: number): never;
  finalize(): void;
}

/** The ranks of one job, as this process sees them. */
export interface RankWorld {
  readonly rank: number;
  readonly size: number;
  /** Every rank's `values` summed, in place (the same on every rank after). */
  allreduceSum(values: Float32Array | Float64Array): void;
  /** Every rank's bytes, in rank order. */
  allgather(bytes: Uint8Array): Uint8Array[];
  barrier(): void;
  /** Ends every rank of the job (after printing `message` on this one). */
  abort(message: string, code?: number): never;
  finalize(): void;
}

/** The number of ranks the launcher started, from its environment (Open MPI, MPICH/Hydra, PMIx); 1 outside one. */
export function launchedRanks(env: NodeJS.ProcessEnv = process.env): number {
  const size = Number(env.OMPI_COMM_WORLD_SIZE ?? env.PMI_SIZE ?? env.PMIX_SIZE ?? 1);
  return Number.isInteger(size) && size > 0 ? size : 1;
}

/** This process's rank as the launcher numbered it (0 outside one). */
export function launchedRank(env: NodeJS.ProcessEnv = process.env): number {
  const rank = Number(env.OMPI_COMM_WORLD_RANK ?? env.PMI_RANK ?? env.PMIX_RANK ?? 0);
  return Number.isInteger(rank) && rank >= 0 ? rank : 0;
}

/** How many ranks the launcher started on this machine (1 outside one). */
export function ranksOnThisMachine(env: NodeJS.ProcessEnv = process.env): number {
  return Number(env.OMPI_COMM_WORLD_LOCAL_SIZE ?? env.MPI_LOCALNRANKS ?? 1) || 1;
}

/** This process's share of the machine's cores when the launcher started several ranks on it (at least 1). */
export function coresForThisRank(env: NodeJS.ProcessEnv = process.env): number {
  return Math.max(1, Math.floor(os.availableParallelism() / ranksOnThisMachine(env)));
}

export function mpiAddonPath(): string {
  return process.env.FLOWRL_MPI_ADDON ?? path.join(PACKAGE_ROOT, 'native', 'mpi', 'build', 'Release', 'flowrl_mpi.node');
}

/** A plain process: one rank, whose gathers return its own bytes and whose sums change nothing. */
export const SINGLE_RANK: RankWorld = {
  rank: 0,
  size: 1,
  allreduceSum: () => {},
  allgather: (bytes) => [bytes],
  barrier: () => {},
  abort: (message) => {
    throw new Error(message);
  },
  finalize: () => {},
};

let world: RankWorld | undefined;

/**
 * The job's ranks when this process was launched as one of several (mpirun -np N), else undefined.
 * Under a launcher without the MPI addon, one clear message: running N copies of a whole training
 * run side by side would give N runs writing the same files.
 */
export function rankWorld(timeoutSeconds: number, env: NodeJS.ProcessEnv = process.env): RankWorld | undefined {
  if (world) return world;
  const launched = launchedRanks(env);
  if (launched <= 1) return undefined;
  const file = mpiAddonPath();
  if (!fs.existsSync(file)) {
    throw new InputError(
      `launched as one of ${launched} ranks (mpirun), but flowrl's MPI addon is not built (${file}); install Open MPI's headers (apt-get install libopenmpi-dev) and rebuild it (npm rebuild flowrl, or node scripts/build-native.mjs in a checkout), or run without mpirun`,
    );
  }
  // Open MPI 4.1's libnbc (ompi/mca/coll/libnbc/nbc_iallreduce.c, v4.1.4) all-reduces in place,
  // or on fewer than 4 ranks, with its binomial tree; its ring sends 2(N-1)/N of the buffer (the
  // cost docs/data-parallel.md models) and was 2.2x faster for a 32 MB gradient over TCP here (22-29
  // against 46-57 ms, 2 ranks), equal on 3 ranks sharing 2 cores, and slower only for buffers of
  // tens of KB, smaller than any model's. Read by MPI_Init; a user's own setting is kept.
  process.env.OMPI_MCA_coll_libnbc_iallreduce_algorithm ??= '1';
  let addon: MpiAddon;
  try {
    addon = createRequire(import.meta.url)(file) as MpiAddon;
  } catch (e) {
    // Built against another Open MPI, Node or machine (a copied tree, a changed library): said in one line.
    throw new InputError(
      `launched as one of ${launched} ranks (mpirun), but flowrl's MPI addon (${file}) does not load: ${((e as Error).message ?? String(e)).split('\n')[0]}; rebuild it on this machine (npm rebuild flowrl, or node scripts/build-native.mjs in a checkout), or run without mpirun`,
    );
  }
  const { rank, size } = addon.init();
  const timeoutMs = timeoutSeconds * 1000;
  // A failed collective means another rank is gone or stuck: every rank stops, not just this one.
  const guard = <T>(what: () => T): T => {
    try {
      return what();
    } catch (e) {
      return made.abort(`[flowrl] rank ${rank}: ${(e as Error).message}; stopping every rank`);
    }
  };
  const made: RankWorld = {
    rank,
    size,
    allreduceSum: (values) => guard(() => addon.allreduceSum(values, timeoutMs)),
    allgather: (bytes) => guard(() => addon.allgather(bytes, timeoutMs)),
    barrier: () => guard(() => addon.barrier(timeoutMs)),
    abort: (message, code = 1) => {
      console.error(message);
      return addon.abort(code);
    },
    finalize: () => addon.finalize(),
  };
  world = made;
  return made;
}

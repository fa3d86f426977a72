// One training run per run directory: `flowrl train` holds <run dir>/.lock (its pid and host) while
// it runs. A second run on the same directory stops at once; a lock whose process is gone (a run
// that crashed or was killed) is taken over, so it never stays stuck.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { InputError } from '../errors.js';

export const RUN_LOCK_FILE = '.lock';

interface LockOwner {
  pid: number;
  host: string;
  started: string;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: the process exists but belongs to another user.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Whether this process sees `runDir`'s lock as held by `owner` (a rank checks it sees rank 0's directory). */
export function seesRunLock(runDir: string, owner: { pid: number; host: string }): boolean {
  const seen = readOwner(path.join(runDir, RUN_LOCK_FILE));
  return seen?.pid === owner.pid && seen.host === owner.host;
}

function readOwner(file: string): LockOwner | undefined {
  try {
    const owner = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<LockOwner>;
    return Number.isInteger(owner.pid) && typeof owner.host === 'string' ? (owner as LockOwner) : undefined;
  } catch {
    return undefined; // unreadable or half-written: nobody can be holding it
  }
}

/**
 * Takes the run directory's lock, or throws an InputError naming the directory and the process
 * that holds it. Returns the release function (also run at process exit).
 */
export function acquireRunLock(runDir: string): () => void {
  fs.mkdirSync(runDir, { recursive: true });
  const file = path.join(runDir, RUN_LOCK_FILE);
  const mine: LockOwner = { pid: process.pid, host: os.hostname(), started: new Date().toISOString() };
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      fs.writeFileSync(file, JSON.stringify(mine) + '\n', { flag: 'wx' });
      const release = () => {
        if (readOwner(file)?.pid === mine.pid) fs.rmSync(file, { force: true });
        process.off('exit', release);
      };
      process.on('exit', release);
      return release;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    const owner = readOwner(file);
    // A lock from another host cannot be checked; one from a live process here is real.
    if (owner && (owner.host !== mine.host || alive(owner.pid))) {
      throw new InputError(`${runDir}: in use by another training run (pid ${owner.pid} on ${owner.host}, since ${owner.started}); wait for it, or set trainer.default_local_dir to another directory (if that run is gone, delete ${file})`);
    }
    fs.rmSync(file, { force: true }); // its process is gone
  }
  throw new InputError(`${runDir}: could not take ${RUN_LOCK_FILE} (another run is starting there)`);
}

// Shared test utilities: fixture paths, temporary directories, closeness checks.
import { expect } from 'chai';
import { InputError } from '../core-adapters/index.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const FIXTURES = path.join(ROOT, 'test', 'fixtures');

export function fixture(...parts: string[]): string {
  return path.join(FIXTURES, ...parts);
}

export function readJson<T = unknown>(file: string): T {
  return JSON.parse(fs.readFileSync(file, 'utf8')) as T;
}

const tempDirs: string[] = [];
process.on('exit', () => tempDirs.forEach((dir) => fs.rmSync(dir, { recursive: true, force: true })));

/** A fresh temporary directory, removed when the process exits. */
export function tempDir(prefix = 'flowrl-test-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

export function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance: number, label = ''): void {
  expect(actual.length, `${label} length`).to.equal(expected.length);
  let worst = 0;
  let at = -1;
  for (let i = 0; i < expected.length; i++) {
    const diff = Math.abs(actual[i] - expected[i]);
    if (!(diff <= worst)) {
      worst = diff;
      at = i;
    }
  }
  expect(worst, `${label} worst |diff| at ${at}: ${actual[at]} vs ${expected[at]}`).to.be.at.most(tolerance);
}

/** Runs fn and checks it throws an InputError whose message contains every fragment. */
export function expectInputError(fn: () => unknown, ...fragments: string[]): InputError {
  let thrown: unknown;
  try {
    fn();
  } catch (e) {
    thrown = e;
  }
  expect(thrown, 'expected an InputError').to.be.instanceOf(InputError);
  const error = thrown as InputError;
  for (const f of fragments) expect(error.message).to.include(f);
  return error;
}

// Fuzzing the config reader: mutated YAML files (characters flipped, dropped or repeated, lines
// swapped, keys renamed, values replaced by other types, YAML aliases and tags) and mutated
// key=value overrides must each resolve or be refused with one InputError, never crash.
// FLOWRL_FUZZ_INPUTS sets the count of each (1,000 here).
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { InputError, readConfigFile, resolveConfig, Rng } from '../core-adapters/index.js';
import { tempDir, writeCountdownConfig, FUZZ_MEMORY_BOUND, residentGrowth } from './helpers.js';

const INPUTS = Number(process.env.FLOWRL_FUZZ_INPUTS ?? 1000);
const ODD_VALUES = ['', 'null', '~', '[]', '{}', '-1', '0', '1e309', 'NaN', '.inf', 'true', '"x"', '[1, [2]]', '{a: {b: c}}', '*anchor', '&a [1]', '!!binary aGk=', '!!js/function "f"', "'\\x00'", '0x10', '1_000'];

function mutateYaml(text: string, rng: Rng): string {
  const pick = <T>(items: T[]): T => items[Math.floor(rng.next() * items.length)];
  const lines = text.split('\n');
  const at = (n: number) => Math.floor(rng.next() * n);
  switch (at(6)) {
    case 0: {
      const i = at(text.length);
      return text.slice(0, i) + String.fromCharCode(at(128)) + text.slice(i + 1);
    }
    case 1: {
      const i = at(text.length);
      return text.slice(0, i) + text.slice(i + 1 + at(20));
    }
    case 2: {
      const [i, j] = [at(lines.length), at(lines.length)];
      [lines[i], lines[j]] = [lines[j], lines[i]];
      return lines.join('\n');
    }
    case 3: {
      const i = at(lines.length);
      lines[i] = lines[i].replace(/^(\s*)[A-Za-z_]+:/, `$1${pick(['trian', 'data', '__proto__', 'constructor', 'x.y', '', '- a'])}:`);
      return lines.join('\n');
    }
    case 4: {
      const i = at(lines.length);
      lines[i] = lines[i].replace(/:\s.*$/, `: ${pick(ODD_VALUES)}`);
      return lines.join('\n');
    }
    default:
      return text.repeat(1 + at(3)).slice(0, at(text.length * 2));
  }
}

function mutateOverride(rng: Rng): string {
  const pick = <T>(items: T[]): T => items[Math.floor(rng.next() * items.length)];
  const keys = ['trainer.total_training_steps', 'data.train_batch_size', 'actor_rollout_ref.actor.optim.lr', 'algorithm.name', 'engine.native', 'trainer', 'a..b', '.x', 'x.', '__proto__.polluted', 'constructor.prototype.x', 'plugins', 'data.train_files'];
  return `${pick(keys)}${pick(['=', '==', '', ' = '])}${pick(ODD_VALUES)}`;
}

describe('fuzzing the config reader', function () {
  this.timeout(120_000);

  it(`resolves or refuses with one InputError each of ${INPUTS} mutated config files and ${INPUTS} mutated overrides (fixed seed)`, () => {
    const dir = tempDir();
    const valid = fs.readFileSync(writeCountdownConfig(dir), 'utf8');
    const file = path.join(dir, 'fuzzed.yaml');
    const rng = new Rng(11);
    const outcomes = { resolved: 0, refused: 0 };
    // A refusal names what was wrong: the file, or for an override the override's key.
    const attempt = (what: string, run: () => void, named: string) => {
      try {
        run();
        outcomes.resolved += 1;
      } catch (e) {
        if (!(e instanceof InputError)) expect.fail(`${what} ended in ${(e as Error).stack}`);
        expect(e.message, what).to.include(named);
        outcomes.refused += 1;
      }
    };
    const memory = residentGrowth();
    for (let i = 0; i < INPUTS; i++) {
      if (i % 50 === 0) memory.sample();
      const text = mutateYaml(valid, rng);
      fs.writeFileSync(file, text);
      attempt(`file ${i}: ${JSON.stringify(text.slice(0, 200))}`, () => resolveConfig({ user: readConfigFile(file), userFile: file }), file);
      const override = mutateOverride(rng);
      attempt(`override ${JSON.stringify(override)}`, () => resolveConfig({ user: {}, userFile: file, overrides: [override] }), '');
    }
    expect(({} as Record<string, unknown>).polluted, 'prototype pollution').to.equal(undefined);
    expect(outcomes.refused, JSON.stringify(outcomes)).to.be.greaterThan(INPUTS / 4);
    expect(memory.growth(), `resident memory grew by ${(memory.growth() / 2 ** 20).toFixed(0)} MB`).to.be.below(FUZZ_MEMORY_BOUND);
    if (process.env.FLOWRL_FUZZ_VERBOSE) console.log(outcomes);
  });
});

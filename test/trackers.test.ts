// trainer.logger (verl's trackers): TensorBoard event files checked against TensorBoard's own proto
// definitions (scripts/tensorboard_oracle.py read the fixture with them in Python's protobuf once),
// and a run's event files against its metrics.jsonl.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { createHost, TOKENS, type Trainer } from '../core-adapters/index.js';
import { encodeEvent, readEventFile, tfRecord } from '../core-adapters/trainer/tensorboard.js';
import { expectInputErrorAsync, fixture, readJson, readRunMetrics, tempDir, writeCountdownConfig } from './helpers.js';

interface FixtureEvent {
  wallTime: number;
  step?: number;
  fileVersion?: string;
  scalars?: Record<string, number | 'NaN'>;
}
interface OracleRecord {
  length_crc_ok: boolean;
  payload_crc_ok: boolean;
  wall_time: number;
  step: number;
  what: string;
  file_version?: string;
  values?: { tag: string; kind: string; simple_value: number }[];
}

describe('trainer.logger: TensorBoard event files', function () {
  this.timeout(120_000);
  const dir = fixture('tensorboard');
  const inputs = readJson<FixtureEvent[]>(path.join(dir, 'inputs.json')).map((e) => ({ ...e, scalars: e.scalars && Object.fromEntries(Object.entries(e.scalars).map(([k, v]) => [k, v === 'NaN' ? NaN : v])) }));

  it("the writer's bytes are the fixture's, which TensorBoard's protos (Python protobuf) read back: CRCs, version, steps, float32 scalars, non-finite values left out", () => {
    const bytes = Buffer.concat(inputs.map((e) => tfRecord(encodeEvent(e))));
    expect(bytes.equals(fs.readFileSync(path.join(dir, 'events.tfevents')))).to.equal(true);
    const { records } = readJson<{ records: OracleRecord[] }>(path.join(dir, 'oracle.json'));
    expect(records).to.have.length(inputs.length);
    records.forEach((r, i) => {
      const input = inputs[i];
      expect([r.length_crc_ok, r.payload_crc_ok], `record ${i}`).to.deep.equal([true, true]);
      expect(r.wall_time).to.equal(input.wallTime);
      expect(r.step).to.equal(input.step ?? 0);
      if (input.fileVersion) expect(r).to.include({ what: 'file_version', file_version: 'brain.Event:2' });
      else {
        const finite = Object.entries(input.scalars ?? {}).filter(([, v]) => Number.isFinite(v));
        expect(r.values ?? [], `record ${i}`).to.deep.equal(finite.map(([tag, v]) => ({ tag, kind: 'simple_value', simple_value: Math.fround(v) })));
      }
    });
    // This host's reader agrees.
    expect(readEventFile(bytes).map((e) => e.step)).to.deep.equal([0, 1, 2, 2 ** 40]);
  });

  it('a run with trainer.logger [console, file, tensorboard]: one event file whose scalars are metrics.jsonl\'s; a directory that cannot be written costs a warning, not the run', async () => {
    const run = tempDir();
    const board = path.join(run, 'board');
    const previous = process.env.TENSORBOARD_DIR;
    process.env.TENSORBOARD_DIR = board;
    try {
      const host = await createHost(writeCountdownConfig(run, { trainer: { logger: ['console', 'file', 'tensorboard'], total_training_steps: 3, test_freq: 3 } }), { quiet: true });
      const trainer = host.container.get<Trainer>(TOKENS.Trainer);
      await trainer.fit();
      trainer.dispose();
      const files = fs.readdirSync(board).filter((f) => f.startsWith('events.out.tfevents.'));
      expect(files).to.have.length(1);
      const events = readEventFile(fs.readFileSync(path.join(board, files[0])));
      expect(events[0].fileVersion).to.equal('brain.Event:2');
      const logged = readRunMetrics(path.join(run, 'run'));
      expect(events.slice(1).map((e) => e.step)).to.deep.equal(logged.map((m) => m.step));
      logged.forEach((metrics, i) => {
        const scalars = events[i + 1].scalars;
        const expected = Object.fromEntries(Object.entries(metrics).filter(([k, v]) => k !== 'step' && Number.isFinite(v)).map(([k, v]) => [k, Math.fround(v)]));
        expect(scalars, `step ${metrics.step}`).to.deep.equal(expected);
      });
      // The directory is a file: the run finishes, with one warning.
      process.env.TENSORBOARD_DIR = path.join(run, 'config.yaml');
      const warnings: string[] = [];
      const warn = console.warn;
      console.warn = (line: string) => warnings.push(line);
      try {
        const other = await createHost(writeCountdownConfig(tempDir(), { trainer: { logger: 'tensorboard', total_training_steps: 2, test_freq: -1, val_before_train: false } }), { quiet: true });
        await other.container.get<Trainer>(TOKENS.Trainer).fit();
        other.container.get<Trainer>(TOKENS.Trainer).dispose();
      } finally {
        console.warn = warn;
      }
      expect(warnings).to.have.length(1);
      expect(warnings[0]).to.contain('trainer.logger tensorboard: cannot write').and.contain('the run goes on without it');
    } finally {
      if (previous === undefined) delete process.env.TENSORBOARD_DIR;
      else process.env.TENSORBOARD_DIR = previous;
    }
  });

  it('a tracker this host does not write is refused naming it', async () => {
    await expectInputErrorAsync(createHost(writeCountdownConfig(tempDir()), { overrides: ['trainer.logger=[console,wandb]'], skipEngine: true }), "trainer.logger: 'wandb' is not a tracker this host writes", "verl's wandb backend is not built here yet");
  });
});

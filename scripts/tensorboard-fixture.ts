// Writes test/fixtures/tensorboard/: inputs.json (steps, wall times, scalars) and events.tfevents, the
// event file this host's TensorBoard writer makes of them. scripts/tensorboard_oracle.py then reads
// that file with TensorBoard's own proto definitions (oracle.json); test/trackers.test.ts checks both.
//   node --import tsx scripts/tensorboard-fixture.ts
import fs from 'node:fs';
import path from 'node:path';
import { encodeEvent, EVENT_FILE_VERSION, generationsMarkdown, tfRecord } from '../core-adapters/trainer/tensorboard.js';

const dir = path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'test', 'fixtures', 'tensorboard');
// Edge cases: float32 rounding, a negative and a tiny value, a large step, tags with slashes and @, a
// non-finite metric (left out), an empty step, a text summary.
const events = [
  { wallTime: 1764115200.125, fileVersion: EVENT_FILE_VERSION },
  { wallTime: 1764115201.5, step: 1, scalars: { 'critic/score/mean': 0.1875, 'actor/pg_loss': -0.0123456789, 'val/pass@8': 0.3125, 'timing_s/step': 1.25e-7 } },
  { wallTime: 1764115202.75, step: 2, scalars: { 'critic/score/mean': 0.2, 'actor/grad_norm': 12345.678, 'nan/metric': Number.NaN } },
  { wallTime: 1764115203, step: 2 ** 40, scalars: {} },
  // A validation's generations as the text plugin's string tensor (UTF-8, Markdown, newlines).
  { wallTime: 1764115204.25, step: 3, texts: { val_generations: generationsMarkdown(3, [{ prompt: '9, 3, 4 -> 24=', response: '(9-3)*4 — ünïcode ✓', score: 1 }, { prompt: '2, 5, 7 -> 17=', response: '2+5', score: 0 }]) } },
];
fs.mkdirSync(dir, { recursive: true });
fs.writeFileSync(path.join(dir, 'inputs.json'), JSON.stringify(events, (_, v) => (typeof v === 'number' && !Number.isFinite(v) ? 'NaN' : v), 2) + '\n');
fs.writeFileSync(path.join(dir, 'events.tfevents'), Buffer.concat(events.map((e) => tfRecord(encodeEvent(e)))));
console.log(`wrote ${dir}`);

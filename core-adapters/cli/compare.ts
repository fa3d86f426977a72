// flowrl compare CONFIG... [--seeds N] [--out DIR] [key=value ...]: every config trained with the
// same seeds and budget, one after another, then one report and a table of final validation
// metrics (mean ± spread over seeds) per config.
import path from 'node:path';
import type { Metrics, Trainer } from '../contracts/index.js';
import { InputError } from '../errors.js';
import { createHost } from '../host.js';
import { writeReport } from '../report/report.js';
import { TOKENS } from '../tokens.js';
import { numberFlag, parseFlags } from './args.js';
import { validationSummary } from './rl-commands.js';

const COLUMNS: [string, string][] = [
  ['val/accuracy', 'accuracy'],
  ['val/pass@k', 'pass@k'],
  ['val/distinct_correct', 'distinct'],
  ['val/correct_entropy', 'entropy'],
];

export function meanAndSpread(values: number[]): string {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const spread = values.length > 1 ? Math.sqrt(values.reduce((s, v) => s + (v - mean) ** 2, 0) / (values.length - 1)) : 0;
  return `${mean.toFixed(3)} ± ${spread.toFixed(3)}`;
}

export async function compareCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseFlags('compare', argv, { seeds: { type: 'string' }, out: { type: 'string' } });
  const seeds = numberFlag('compare', values, 'seeds', 3, { integer: true, min: 1 });
  const out = (values.out as string | undefined) ?? path.join('runs', 'compare');
  const configs = positionals.filter((p) => !p.includes('='));
  const overrides = positionals.filter((p) => p.includes('='));
  if (!configs.length) throw new InputError('usage: flowrl compare CONFIG... [--seeds N] [--out DIR] [key=value ...]');

  const rows: { name: string; before: Metrics[]; after: Metrics[] }[] = [];
  const runDirs: string[] = [];
  for (const config of configs) {
    const row = { name: path.basename(config, path.extname(config)), before: [] as Metrics[], after: [] as Metrics[] };
    for (let seed = 1; seed <= seeds; seed++) {
      const runDir = path.join(out, `${row.name}-seed${seed}`);
      process.stderr.write(`[flowrl compare] ${config} seed ${seed} -> ${runDir}\n`);
      const host = await createHost(config, {
        overrides: [...overrides, `trainer.seed=${seed}`, `trainer.default_local_dir=${runDir}`, 'trainer.resume_mode=disable', `trainer.experiment_name=${row.name}-seed${seed}`],
        quiet: seed > 1 || rows.length > 0,
      });
      const trainer = host.container.get<Trainer>(TOKENS.Trainer);
      await trainer.fit();
      trainer.dispose();
      const summary = validationSummary(runDir);
      if (summary.before) row.before.push(summary.before);
      if (summary.after) row.after.push(summary.after);
      runDirs.push(runDir);
    }
    rows.push(row);
  }
  const reportFile = path.join(out, 'report.html');
  await writeReport(runDirs, reportFile, { title: `flowrl compare (${seeds} seeds)` });

  const header = ['config'.padEnd(24), ...COLUMNS.map(([, label]) => label.padStart(16))].join('');
  console.log(`final validation, mean ± std over ${seeds} seeds (before training: accuracy ${rows.map((r) => `${r.name} ${meanAndSpread(r.before.map((m) => m['val/accuracy']))}`).join(', ')})`);
  console.log(header);
  for (const row of rows) {
    const cells = COLUMNS.map(([key]) => (row.after.length ? meanAndSpread(row.after.map((m) => m[key] ?? NaN)) : '-').padStart(16));
    console.log([row.name.padEnd(24), ...cells].join(''));
  }
  console.log(`runs: ${out}\nreport: ${reportFile}`);
}

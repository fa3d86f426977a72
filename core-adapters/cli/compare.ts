// flowrl compare CONFIG... [--seeds N] [--baseline NAME] [--out DIR] [--resume] [--markdown] [key=value ...]: every
// config trained with the same seeds and budget, one after another, then one report and the final
// validation metrics per config (mean, 95 % t interval over seeds) with paired comparisons against
// the baseline config (see report/comparison.ts).
import path from 'node:path';
import type { Trainer } from '../contracts/index.js';
import { InputError } from '../errors.js';
import { createHost } from '../composition.js';
import { compareRuns, comparisonMarkdown, comparisonText, type CompareGroup } from '../report/comparison.js';
import { writeReport } from '../report/report.js';
import { TOKENS } from '../tokens.js';
import { numberFlag, parseFlags } from './args.js';

const USAGE = 'usage: flowrl compare CONFIG... [--seeds N] [--first-seed S] [--baseline NAME] [--out DIR] [--resume] [--markdown] [key=value ...]';

export async function compareCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseFlags('compare', argv, { seeds: { type: 'string' }, 'first-seed': { type: 'string' }, out: { type: 'string' }, baseline: { type: 'string' }, resume: { type: 'boolean' }, markdown: { type: 'boolean' } });
  const seeds = numberFlag('compare', values, 'seeds', 3, { integer: true, min: 1 });
  // Fresh seeds for a report (keys chosen on seeds 1-5 are then reported on others).
  const firstSeed = numberFlag('compare', values, 'first-seed', 1, { integer: true, min: 0 });
  const out = (values.out as string | undefined) ?? path.join('runs', 'compare');
  const configs = positionals.filter((p) => !p.includes('='));
  const overrides = positionals.filter((p) => p.includes('='));
  if (!configs.length) throw new InputError(USAGE);
  const names = configs.map((c) => path.basename(c, path.extname(c)));
  const baseline = (values.baseline as string | undefined) ?? names[0];
  // Checked before hours of training, not after.
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice) throw new InputError(`two configs are named '${twice}': their runs would share ${path.join(out, `${twice}-seed${firstSeed}`)}; rename one`);
  if (!names.includes(baseline)) throw new InputError(`--baseline: '${baseline}' is not one of the compared configs (${names.join(', ')})`);

  // --resume: an interrupted comparison goes on; finished runs restore their last step and train no more.
  const resumeMode = values.resume ? 'auto' : 'disable';

  const rows: CompareGroup[] = [];
  const runDirs: string[] = [];
  for (const [i, config] of configs.entries()) {
    const row: CompareGroup = { name: names[i], dirs: [] };
    for (let seed = firstSeed; seed < firstSeed + seeds; seed++) {
      const runDir = path.join(out, `${row.name}-seed${seed}`);
      process.stderr.write(`[flowrl compare] ${config} seed ${seed} -> ${runDir}\n`);
      const host = await createHost(config, {
        overrides: [...overrides, `trainer.seed=${seed}`, `trainer.default_local_dir=${runDir}`, `trainer.resume_mode=${resumeMode}`, `trainer.experiment_name=${row.name}-seed${seed}`],
        quiet: seed > firstSeed || rows.length > 0,
      });
      const trainer = host.container.get<Trainer>(TOKENS.Trainer);
      await trainer.fit();
      trainer.dispose();
      row.dirs.push(runDir);
      runDirs.push(runDir);
    }
    rows.push(row);
  }
  const comparison = compareRuns(rows, { baseline });
  const reportFile = path.join(out, 'report.html');
  await writeReport(runDirs, reportFile, { title: `flowrl compare (${seeds} seeds)`, comparison });
  console.log((values.markdown ? comparisonMarkdown(comparison) : comparisonText(comparison)).join('\n'));
  console.log(`runs: ${out}\nreport: ${reportFile}`);
}

// flowrl report RUN_DIR... [--out FILE] [--title TEXT]: one self-contained HTML file comparing runs.
import path from 'node:path';
import { InputError } from '../errors.js';
import { REPORT_FILE, writeReport } from '../report/report.js';
import { parseFlags } from './args.js';

export const REPORT_USAGE = 'usage: flowrl report RUN_DIR... [--out FILE] [--title TEXT]';

export async function reportCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseFlags('report', argv, { out: { type: 'string' }, title: { type: 'string' } });
  if (!positionals.length) throw new InputError(REPORT_USAGE);
  const { out: outFlag, title } = values;
  if (outFlag !== undefined && (typeof outFlag !== 'string' || outFlag === '')) throw new InputError('--out needs a file name');
  const out = outFlag ?? path.join(positionals[0], REPORT_FILE);
  await writeReport(positionals, out, { title: typeof title === 'string' ? title : undefined });
  console.log(out);
}

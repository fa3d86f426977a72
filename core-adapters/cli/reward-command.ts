// flowrl reward ROWS --responses FILE [--config CONFIG] [--json] [key=value ...]: scores responses
// against verl rows with the scorer a run would use (by data_source, a plugin's, or
// custom_reward_function), so a reward can be checked before training on it.
import { resolveConfig, type Config } from '../config/load.js';
import { createHost } from '../composition.js';
import { readRows } from '../data/rows.js';
import { InputError } from '../errors.js';
import { readJsonLines } from '../jsonl.js';
import { loadCustomScorer, ScorerRegistry, scoreResponse, type Scorer } from '../rewards/registry.js';
import { parseFlags } from './args.js';

const USAGE = 'usage: flowrl reward ROWS.jsonl|ROWS.parquet --responses FILE.jsonl [--config CONFIG] [--json] [key=value ...]';

/** The responses file: one JSON object per line with a string `response`, in the rows' order. */
function readResponses(file: string): string[] {
  return readJsonLines(file).map(({ value, where }) => {
    const response = (value as { response?: unknown } | null)?.response;
    if (typeof response !== 'string') throw new InputError(`${where}: expected an object with a string 'response'`);
    return response;
  });
}

export async function rewardCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseFlags('reward', argv, { responses: { type: 'string' }, config: { type: 'string' }, json: { type: 'boolean' } });
  const [rowsFile, ...overrides] = positionals;
  if (!rowsFile || typeof values.responses !== 'string') throw new InputError(USAGE);
  for (const o of overrides) if (!o.includes('=')) throw new InputError(`'${o}' is not a key=value override (${USAGE})`);
  let config: Config;
  let scorers: ScorerRegistry;
  if (typeof values.config === 'string') {
    const host = await createHost(values.config, { overrides, skipEngine: true, quiet: true });
    [config, scorers] = [host.config, host.registries.scorers];
  } else {
    config = resolveConfig({ user: {}, userFile: 'command line', overrides });
    scorers = new ScorerRegistry(config.reward_model);
  }
  const rows = await readRows(rowsFile);
  const responses = readResponses(values.responses);
  if (responses.length !== rows.length) throw new InputError(`${values.responses}: ${responses.length} responses for ${rows.length} rows in ${rowsFile} (one per row, in order)`);
  const { path: customPath, name } = config.custom_reward_function;
  const custom = customPath ? await loadCustomScorer(customPath, name) : undefined;
  const kwargs = config.reward_model.reward_kwargs as Record<string, Record<string, unknown> | undefined>;
  if (!custom) scorers.checkRewardKwargs(kwargs);
  // Every row is checked before anything runs, so a bad one is named at once.
  const perRow: Scorer[] = rows.map((row, i) => {
    if (custom) return custom;
    scorers.checkRow(`${rowsFile} row ${i + 1}`, row.data_source, row.reward_model.ground_truth);
    return scorers.scorer(row.data_source, kwargs[row.data_source] ?? {})!;
  });
  // A response whose scoring fails scores 0 with the reason, as in a run.
  const results = await Promise.all(rows.map((row, i) => scoreResponse(perRow[i], responses[i], row.reward_model.ground_truth, row.extra_info ?? {}, row.data_source)));
  const scored = results.map((r, i) => ({ row: i + 1, data_source: rows[i].data_source, ...r }));
  if (values.json) {
    for (const s of scored) console.log(JSON.stringify({ row: s.row, data_source: s.data_source, score: s.score, ...s.extras, ...(s.error ? { error: s.error.kind, error_message: s.error.message } : {}) }));
    return;
  }
  const extraKeys = [...new Set(scored.flatMap((s) => Object.keys(s.extras)))].filter((k) => k !== 'pred');
  const failed = scored.filter((s) => s.error);
  console.log(['row', 'data_source', 'score', ...extraKeys, ...(failed.length ? ['error'] : [])].join('\t'));
  for (const s of scored) console.log([s.row, s.data_source, s.score, ...extraKeys.map((k) => s.extras[k] ?? ''), ...(failed.length ? [s.error?.kind ?? ''] : [])].join('\t'));
  const mean = scored.reduce((sum, s) => sum + s.score, 0) / Math.max(1, scored.length);
  console.log(`${scored.length} responses, mean score ${mean.toFixed(4)}${failed.length ? `; ${failed.length} scored 0 because scoring failed (first, row ${failed[0].row}: ${failed[0].error!.kind}: ${failed[0].error!.message.slice(0, 200)})` : ''}`);
}

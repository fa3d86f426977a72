// flowrl report: one self-contained HTML file comparing runs — plots over training steps (one
// line per run; per algorithm a mean line with a min–max band for validation metrics) and summary
// tables. The plots are Vega-Lite specs rendered to inline SVG in Node: the page has no script,
// no stylesheet or font to fetch, and works offline.
import fs from 'node:fs';
import path from 'node:path';
import { InputError } from '../errors.js';
import { answerSharesSpec, bandRows, bandSpec, passAtKCurveRows, passAtKCurveSpec, perRunRows, perRunSpec, PLOTS, plotKeyFor, renderSvg, type PlotDef } from './charts.js';
import { formatDifferenceInterval, formatInterval, formatSigned, LEVEL, type Comparison } from './comparison.js';
import { readReportRuns, seriesOf, type ReportRun } from './runs.js';
import { readValGenerations, readValPrompts, type PromptMatchingRecord, type ValGeneration, type ValPromptRecord } from '../trainer/val-prompts.js';
import { mean, sampleStd } from './statistics.js';

export type { ReportRun } from './runs.js';
export { readReportRuns } from './runs.js';

export interface ReportOptions {
  /** The page title and heading; default "flowrl report". */
  title?: string;
  /** flowrl compare's statistics: a comparison section, and the pass@k curves grouped by its configs. */
  comparison?: Comparison;
}

/** The file name `flowrl report` writes inside the first run directory by default. */
export const REPORT_FILE = 'report.html';

const DASH = '—';

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

function fixed(value: number | undefined, digits = 3): string {
  return value === undefined ? DASH : value.toFixed(digits);
}

function duration(seconds: number): string {
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const s = Math.round(seconds);
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

function last(run: ReportRun, key: string): number | undefined {
  const series = seriesOf(run, key);
  return series.length ? series[series.length - 1].value : undefined;
}

function atStep(run: ReportRun, key: string, step: number): number | undefined {
  return run.steps.find((s) => s.step === step)?.values.get(key);
}

interface Cell {
  text: string;
  /** The raw number behind the text (a data-value attribute), when there is one. */
  value?: number;
  key: string;
}

function td(cell: Cell): string {
  const value = cell.value !== undefined ? ` data-value="${cell.value}"` : '';
  const cls = cell.value !== undefined ? ' class="num"' : '';
  return `<td data-key="${esc(cell.key)}"${value}${cls}>${esc(cell.text)}</td>`;
}

function num(key: string, value: number | undefined, digits = 3): Cell {
  return { key, text: fixed(value, digits), value };
}

/** Final validation metrics shown in the tables (correct_entropy only when some run logged it). */
function finalKeys(runs: ReportRun[]): { key: string; label: string }[] {
  const keys = [
    { key: 'val/pass@k', label: 'pass@k' },
    { key: 'val/distinct_correct', label: 'distinct correct' },
    { key: 'val/correct_entropy', label: 'correct entropy' },
  ];
  return keys.filter((k) => k.key !== 'val/correct_entropy' || runs.some((r) => last(r, k.key) !== undefined));
}

function runsTable(runs: ReportRun[]): string {
  const finals = finalKeys(runs);
  const head = [
    'run',
    'algorithm',
    'steps',
    'val accuracy before',
    'val accuracy after',
    ...finals.map((f) => `${f.label} after`),
    'mean throughput (tokens/s)',
    'wall time',
    'directory',
  ];
  const rows = runs.map((run) => {
    const steps = run.steps.length ? run.steps[run.steps.length - 1].step : undefined;
    const accuracy = seriesOf(run, 'val/accuracy');
    const throughput = seriesOf(run, 'perf/throughput').map((p) => p.value);
    const stepTimes = seriesOf(run, 'timing_s/step').map((p) => p.value);
    const wall = stepTimes.length ? stepTimes.reduce((s, v) => s + v, 0) : undefined;
    const after = accuracy.length ? accuracy[accuracy.length - 1] : undefined;
    const cells: Cell[] = [
      { key: 'run', text: run.label },
      { key: 'algorithm', text: run.algorithm ?? DASH },
      { key: 'steps', text: steps === undefined ? DASH : String(steps), value: steps },
      num('val/accuracy@before', atStep(run, 'val/accuracy', 0)),
      num('val/accuracy@after', after?.value),
      ...finals.map((f) => num(`${f.key}@after`, last(run, f.key))),
      num('perf/throughput@mean', throughput.length ? mean(throughput) : undefined, 1),
      { key: 'timing_s/step@sum', text: wall === undefined ? DASH : duration(wall), value: wall },
      { key: 'directory', text: run.dir },
    ];
    const [label, ...rest] = cells;
    return `<tr><th scope="row" data-key="run">${esc(label.text)}</th>${rest.map(td).join('')}</tr>`;
  });
  return [
    '<table id="summary-runs">',
    '<caption>One row per run. “Before”: validation at step 0 (when logged); “after”: the last validation logged. Wall time sums <code>timing_s/step</code>.</caption>',
    `<thead><tr>${head.map((h) => `<th scope="col">${esc(h)}</th>`).join('')}</tr></thead>`,
    `<tbody>${rows.join('\n')}</tbody>`,
    '</table>',
  ].join('\n');
}

function algorithmsTable(runs: ReportRun[]): string {
  const groups = new Map<string, ReportRun[]>();
  for (const run of runs) if (run.algorithm) groups.set(run.algorithm, [...(groups.get(run.algorithm) ?? []), run]);
  const several = [...groups.entries()].filter(([, members]) => members.length > 1);
  if (!several.length) return '<p class="note" id="summary-algorithms-note">No algorithm has more than one run: no mean ± std over seeds.</p>';
  const finals = [{ key: 'val/accuracy', label: 'val accuracy' }, ...finalKeys(runs)];
  const head = ['algorithm', 'runs', ...finals.map((f) => `${f.label} (final)`)];
  const rows = several.map(([algorithm, members]) => {
    const cells = finals.map((f) => {
      const values = members.map((r) => last(r, f.key)).filter((v): v is number => v !== undefined);
      if (!values.length) return td({ key: f.key, text: DASH });
      const n = values.length < members.length ? ` (n=${values.length})` : '';
      const m = mean(values);
      const s = sampleStd(values);
      return `<td data-key="${esc(f.key)}" data-mean="${m}" data-std="${s}" class="num">${m.toFixed(3)} ± ${s.toFixed(3)}${n}</td>`;
    });
    return `<tr><th scope="row" data-key="algorithm">${esc(algorithm)}</th><td data-key="runs" class="num">${members.length}</td>${cells.join('')}</tr>`;
  });
  return [
    '<table id="summary-algorithms">',
    '<caption>Algorithms with several runs (seeds): mean ± sample standard deviation of the last logged validation metrics.</caption>',
    `<thead><tr>${head.map((h) => `<th scope="col">${esc(h)}</th>`).join('')}</tr></thead>`,
    `<tbody>${rows.join('\n')}</tbody>`,
    '</table>',
  ].join('\n');
}

function intervalAttributes(i: { mean: number; low: number | null; high: number | null }): string {
  return ` data-mean="${i.mean}"` + (i.low === null ? '' : ` data-low="${i.low}" data-high="${i.high}"`);
}

/** flowrl compare's tables: intervals over seeds per config, then the paired differences. */
function comparisonSection(c: Comparison): string {
  const percent = `${LEVEL * 100} %`;
  const head = ['metric', ...c.groups.map((g) => `${g.name} (${g.runs} seed${g.runs === 1 ? '' : 's'})`)];
  const row = (key: string, label: string, cell: (g: Comparison['groups'][number]) => string) =>
    `<tr><th scope="row" data-key="${esc(key)}">${esc(label)}</th>${c.groups.map(cell).join('')}</tr>`;
  const tdInterval = (group: string, key: string, i: Parameters<typeof formatInterval>[0]) =>
    i ? `<td data-group="${esc(group)}" data-key="${esc(key)}"${intervalAttributes(i)} class="num">${esc(formatInterval(i))}</td>` : td({ key, text: DASH });
  const rows = [
    ...(c.groups.some((g) => g.before.has('val/accuracy')) ? [row('val/accuracy@before', 'accuracy at step 0', (g) => tdInterval(g.name, 'val/accuracy@before', g.before.get('val/accuracy')))] : []),
    ...c.metrics.map((m) => row(m.key, m.label, (g) => tdInterval(g.name, m.key, g.final.get(m.key)))),
  ];
  const parts = [
    '<section id="comparison">',
    '<h2>Comparison over seeds</h2>',
    '<div class="table-wrap">',
    '<table id="comparison-summary">',
    `<caption>Final validation of each config: mean over seeds and its ${percent} confidence interval (Student t: mean ± t<sub>0.975, N−1</sub> · s/√N; n/a with one seed).</caption>`,
    `<thead><tr>${head.map((h) => `<th scope="col">${esc(h)}</th>`).join('')}</tr></thead>`,
    `<tbody>${rows.join('\n')}</tbody>`,
    '</table>',
    '</div>',
  ];
  const compared = c.pairs.filter((p) => !p.skipped);
  for (const p of c.pairs.filter((p) => p.skipped)) parts.push(`<p class="note">${esc(p.name)} - ${esc(p.baseline)}: no paired comparison (${esc(p.skipped!)})</p>`);
  if (compared.length) {
    const pairedHead = ['comparison', 'metric', 'difference', `bootstrap ${percent} CI`, `paired t ${percent} CI`, `significant at ${percent}`];
    const pairedRows = compared.flatMap((p) =>
      p.metrics.map((m) => {
        const attrs = `data-pair="${esc(`${p.name} - ${p.baseline}`)}" data-key="${esc(m.key)}"`;
        return [
          `<tr ${attrs} data-difference="${m.difference}" data-low="${m.bootstrap.low}" data-high="${m.bootstrap.high}"${m.t.low === null ? '' : ` data-t-low="${m.t.low}" data-t-high="${m.t.high}"`} data-significant="${m.significant}">`,
          `<th scope="row">${esc(p.name)} - ${esc(p.baseline)}</th><td>${esc(m.label)}</td>`,
          `<td class="num">${esc(formatSigned(m.difference))}</td>`,
          `<td class="num">${esc(formatDifferenceInterval(m.bootstrap.low, m.bootstrap.high))}</td>`,
          `<td class="num">${esc(formatDifferenceInterval(m.t.low, m.t.high))}</td>`,
          `<td>${m.significant ? 'yes' : 'no'}</td></tr>`,
        ].join('');
      }),
    );
    const pairing = compared.map((p) => `${esc(p.name)} - ${esc(p.baseline)}: seeds ${esc(p.seeds.join(', '))}, ${p.prompts} prompts`).join('; ');
    const baselines = [...new Set(compared.map((p) => p.baseline))];
    parts.push(
      `<h3>Paired differences against ${esc(baselines.join(', '))}</h3>`,
      '<div class="table-wrap">',
      '<table id="comparison-paired">',
      `<caption>Paired differences (config − baseline) over the same seeds and validation prompts (${pairing}). ` +
        `Bootstrap: ${c.resamples} seeded resamples of seeds and, independently, of prompts (the two are crossed), percentile interval. ` +
        `Paired t: over the per-seed differences. Significant when both intervals exclude 0 (with one seed, the bootstrap alone).</caption>`,
      `<thead><tr>${pairedHead.map((h) => `<th scope="col">${esc(h)}</th>`).join('')}</tr></thead>`,
      `<tbody>${pairedRows.join('\n')}</tbody>`,
      '</table>',
      '</div>',
    );
  }
  parts.push('</section>');
  return parts.join('\n');
}

/** The runs grouped for the pass@k curves: by compared config, else by algorithm (else by run). */
function curveGroups(runs: ReportRun[], comparison?: Comparison): { name: string; runs: ReportRun[] }[] {
  if (comparison) return comparison.groups.map((g) => ({ name: g.name, runs: runs.filter((r) => g.dirs.includes(r.dir)) }));
  const groups = new Map<string, ReportRun[]>();
  for (const run of runs) groups.set(run.algorithm ?? run.label, [...(groups.get(run.algorithm ?? run.label) ?? []), run]);
  return [...groups.entries()].map(([name, members]) => ({ name, runs: members }));
}

const PASS_AT_K_CURVE = { id: 'plot-pass-at-k-curve', title: 'pass@k curves' };

async function passAtKCurveSection(runs: ReportRun[], comparison?: Comparison): Promise<string> {
  const heading = `<h2>${PASS_AT_K_CURVE.title} <code>val/pass@1, val/pass@2, …</code></h2>`;
  const { rows, groups, ks } = passAtKCurveRows(curveGroups(runs, comparison));
  if (!rows.length) return `<section id="${PASS_AT_K_CURVE.id}" class="plot empty">\n${heading}\n<p class="note">no run logged val/pass@j</p>\n</section>`;
  const svg = await renderSvg(passAtKCurveSpec(rows, groups, ks), 'pk-');
  const by = comparison ? 'config' : 'algorithm';
  return [
    `<section id="${PASS_AT_K_CURVE.id}" class="plot">`,
    heading,
    '<p class="help">unbiased pass@k (Chen et al. 2021) at each run\'s final validation, against k on a log2 axis</p>',
    `<div class="figures"><figure class="chart pass-at-k-curve">${svg}<figcaption>One line per ${by}: the mean over its runs; the band is the ${LEVEL * 100} % t interval over seeds (drawn with two runs or more).</figcaption></figure></div>`,
    '</section>',
  ].join('\n');
}

const ANSWER_SHARES = { id: 'correct-answer-shares', title: 'Correct-answer distributions' };
/** Prompts and answers per prompt the chart shows. */
const SHARE_PROMPTS = 4;
const SHARE_ANSWERS = 8;

/**
 * For a few validation prompts (those whose correct answers the reference spreads most evenly), each
 * correct answer's share of the correct set under the reference and under each config's (or
 * algorithm's) final policy, averaged over its runs: FlowRL's target keeps the reference's shares.
 */
async function answerSharesSection(runs: ReportRun[], comparison?: Comparison): Promise<string> {
  const heading = `<h2>${ANSWER_SHARES.title} <code>val_prompts.jsonl: matching</code></h2>`;
  const groups = curveGroups(runs, comparison)
    .map((g) => ({ name: `${g.name} (${g.runs.length} run${g.runs.length === 1 ? '' : 's'})`, finals: g.runs.map((r) => readValPrompts(r.dir, 'final')).filter((m) => m !== null && [...m.values()].some((r) => r.matching?.answers)) as Map<number, ValPromptRecord>[] }))
    .filter((g) => g.finals.length);
  const withAnswers = (records: Map<number, { matching?: PromptMatchingRecord }>, prompt: number) => records.get(prompt)?.matching?.answers !== undefined;
  const first = groups[0]?.finals[0];
  const prompts = first
    ? [...first.entries()]
        .filter(([prompt]) => groups.every((g) => g.finals.every((f) => withAnswers(f, prompt))))
        .sort(([a, x], [b, y]) => y.matching!.ref_entropy - x.matching!.ref_entropy || a - b)
        .slice(0, SHARE_PROMPTS)
    : [];
  if (!prompts.length) {
    return `<section id="${ANSWER_SHARES.id}" class="plot empty">\n${heading}\n<p class="note">no run logged the shares of listed correct answers (trainer.val_matching, on a task that lists them)</p>\n</section>`;
  }
  const series = ['reference (base)', ...groups.map((g) => g.name)];
  const figures: string[] = [];
  for (const [i, [prompt, record]] of prompts.entries()) {
    const m = record.matching!;
    const top = m.ref_shares.map((share, index) => ({ share, index })).sort((a, b) => b.share - a.share).slice(0, SHARE_ANSWERS);
    const rows = top.flatMap(({ share, index }, rank) => [
      { answer: m.answers![index], rank, series: series[0], share },
      ...groups.map((g) => ({ answer: m.answers![index], rank, series: g.name, share: mean(g.finals.map((f) => f.get(prompt)!.matching!.shares[index])) })),
    ]);
    const svg = await renderSvg(answerSharesSpec(rows, series, `validation prompt ${prompt}`), `cs${i}-`);
    figures.push(`<figure class="chart answer-shares" data-prompt="${prompt}">${svg}</figure>`);
  }
  return [
    `<section id="${ANSWER_SHARES.id}" class="plot">`,
    heading,
    `<p class="help">each correct answer's share of the prompt's correct set, exactly (every listed answer scored under each model), at each run's final validation; the ${SHARE_ANSWERS} answers the reference favours most, for the ${prompts.length} prompts whose correct answers it spreads most evenly. ` +
      'FlowRL targets the reference\'s shares; a reward maximiser piles the mass onto few answers. Several runs of a config: their mean.</p>',
    `<div class="figures">${figures.join('')}</div>`,
    '</section>',
  ].join('\n');
}

function keysText(plot: PlotDef): string {
  return plot.keys.join(' or ');
}

async function plotSection(plot: PlotDef, runs: ReportRun[], labels: string[], index: number): Promise<string> {
  const heading = `<h2>${esc(plot.titleFor?.(runs) ?? plot.title)} <code>${esc(keysText(plot))}</code></h2>`;
  const help = plot.help ? `<p class="help">${esc(plot.help)}</p>` : '';
  const { rows, missing } = perRunRows(plot, runs);
  if (!rows.length) {
    return `<section id="${plot.id}" class="plot empty">\n${heading}\n<p class="note">no run logged ${esc(keysText(plot))}</p>\n</section>`;
  }
  const parts = [`<section id="${plot.id}" class="plot">`, heading, help, '<div class="figures">'];
  const perRun = await renderSvg(perRunSpec(plot, rows, labels), `p${index}a-`);
  const kind = plot.validation ? 'logged validation steps' : 'training steps';
  parts.push(`<figure class="chart per-run">${perRun}<figcaption>One line per run, over ${kind}.</figcaption></figure>`);
  if (plot.validation) {
    const band = bandRows(plot, runs);
    if (band) {
      const svg = await renderSvg(bandSpec(plot, band.rows, band.groups), `p${index}b-`);
      parts.push(`<figure class="chart spread">${svg}<figcaption>Mean ± spread per algorithm: the line is the mean over its runs, the band spans min–max.</figcaption></figure>`);
    }
  }
  parts.push('</div>');
  if (missing.length) parts.push(`<p class="note">not logged by ${missing.map((r) => esc(r.label)).join(', ')}</p>`);
  const keys = new Set(rows.map((r) => r.metric));
  if (keys.size > 1) {
    const which = runs.filter((r) => plotKeyFor(plot, r)).map((r) => `${esc(r.label)}: <code>${esc(plotKeyFor(plot, r)!)}</code>`);
    parts.push(`<p class="note">metric per run: ${which.join(', ')}</p>`);
  }
  parts.push('</section>');
  return parts.filter(Boolean).join('\n');
}

/** Runs whose generations the report shows (each run's last validation, val_generations.jsonl). */
const GENERATION_RUNS = 6;
const GENERATIONS = { id: 'generations', title: 'Validation generations' };

/** One generation: the prompt, then the response, or a conversation's turns with the tool answers set apart. */
function generationHtml(g: ValGeneration): string {
  const turns = g.turns?.length ? g.turns : [{ role: 'assistant', content: g.response }];
  const body = turns.map((t) => `<div class="turn ${t.role === 'tool' ? 'tool' : 'assistant'}"><span>${esc(t.role)}</span><pre>${esc(t.content)}</pre></div>`).join('\n');
  return `<div class="generation"><div class="turn prompt"><span>prompt</span><pre>${esc(g.prompt)}</pre></div>\n${body}\n<p>score ${fixed(g.score)}${g.turns ? ` · ${g.turns.filter((t) => t.role === 'tool').length} tool answers` : ''}</p></div>`;
}

function generationsSection(runs: ReportRun[]): string {
  const shown = runs.map((run) => ({ run, generations: readValGenerations(run.dir) })).filter((r) => r.generations.length).slice(0, GENERATION_RUNS);
  if (!shown.length) return '';
  const blocks = shown.map(({ run, generations }) => `<details><summary>${esc(run.label)} · step ${generations[0].step} · ${generations.length} generations</summary>\n${generations.map(generationHtml).join('\n')}\n</details>`);
  return [`<section id="${GENERATIONS.id}">`, `<h2>${GENERATIONS.title} <code>val_generations.jsonl</code></h2>`, `<p>The first sample of each of the first prompts at each run's last validation (trainer.log_val_generations)${runs.length > shown.length ? `; the first ${GENERATION_RUNS} runs with some` : ''}.</p>`, ...blocks, '</section>'].join('\n');
}

const STYLE = `
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1f2328; background: #f6f8fa; line-height: 1.45; }
header { background: #24292f; color: #fff; padding: 1rem 1.5rem; }
header h1 { margin: 0 0 .25rem; font-size: 1.5rem; }
header p { margin: 0; color: #d0d7de; font-size: .9rem; }
nav { padding: .5rem 1.5rem; background: #fff; border-bottom: 1px solid #d0d7de; font-size: .9rem; }
nav a { margin-right: .9rem; color: #0969da; text-decoration: none; white-space: nowrap; }
nav a:hover { text-decoration: underline; }
main { padding: 1rem 1.5rem 2rem; max-width: 1400px; }
section { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: .75rem 1rem; margin: 0 0 1rem; }
h2 { font-size: 1.15rem; margin: .1rem 0 .4rem; }
h3 { font-size: 1rem; margin: 1rem 0 .4rem; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .85em; color: #57606a; font-weight: normal; }
.help, .note, figcaption, caption { color: #57606a; font-size: .85rem; }
.note { font-style: italic; }
.figures { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; }
figure svg { max-width: 100%; height: auto; display: block; }
caption { text-align: left; caption-side: bottom; padding-top: .4rem; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; font-size: .88rem; }
th, td { border: 1px solid #d0d7de; padding: .3rem .55rem; text-align: left; vertical-align: top; }
thead th { background: #f6f8fa; }
tbody th, td[data-key="timing_s/step@sum"] { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.generation { border: 1px solid #d0d7de; border-radius: 6px; padding: .5rem; margin: .5rem 0; }
.turn { margin: .25rem 0; } .turn span { font-size: .75rem; color: #57606a; } .turn pre { margin: 0; white-space: pre-wrap; }
.turn.tool pre { background: #f6f8fa; border-left: 3px solid #8c959f; padding-left: .5rem; }
td[data-key="directory"] { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .8rem; color: #57606a; }
`;

/** Builds the report for the given run directories and returns the HTML. */
export async function buildReport(runDirs: string[], options: ReportOptions = {}): Promise<string> {
  if (!runDirs.length) throw new InputError('no run directories given');
  const runs = readReportRuns(runDirs);
  const labels = runs.map((r) => r.label);
  const title = options.title ?? 'flowrl report';
  const sections: string[] = [];
  for (const [i, plot] of PLOTS.entries()) {
    sections.push(await plotSection(plot, runs, labels, i));
    if (plot.id === 'plot-val-pass-at-k') sections.push(await passAtKCurveSection(runs, options.comparison));
    if (plot.id === 'plot-val-matching-entropy') sections.push(await answerSharesSection(runs, options.comparison));
  }
  const algorithms = [...new Set(runs.map((r) => r.algorithm).filter((a): a is string => !!a))];
  const meta = `${runs.length} run${runs.length === 1 ? '' : 's'}${algorithms.length ? ` · algorithms: ${algorithms.join(', ')}` : ''} · generated by flowrl report`;
  const navTargets = [{ id: 'summary', title: 'Summary' }, ...(options.comparison ? [{ id: 'comparison', title: 'Comparison' }] : []), ...PLOTS];
  navTargets.splice(navTargets.findIndex((p) => p.id === 'plot-val-pass-at-k') + 1, 0, PASS_AT_K_CURVE);
  navTargets.splice(navTargets.findIndex((p) => p.id === 'plot-val-matching-entropy') + 1, 0, ANSWER_SHARES);
  const generations = generationsSection(runs);
  if (generations) navTargets.push(GENERATIONS);
  const nav = navTargets.map((p) => `<a href="#${p.id}">${esc(p.title)}</a>`).join('\n');
  return [
    '<!DOCTYPE html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${esc(title)}</title>`,
    '<link rel="icon" href="data:,">',
    `<style>${STYLE}</style>`,
    '</head>',
    '<body>',
    `<header><h1>${esc(title)}</h1><p>${esc(meta)}</p></header>`,
    `<nav>\n${nav}\n</nav>`,
    '<main>',
    '<section id="summary">',
    '<h2>Summary</h2>',
    `<div class="table-wrap">\n${runsTable(runs)}\n</div>`,
    '<h3>Per algorithm</h3>',
    `<div class="table-wrap">\n${algorithmsTable(runs)}\n</div>`,
    '</section>',
    ...(options.comparison ? [comparisonSection(options.comparison)] : []),
    ...sections,
    ...(generations ? [generations] : []),
    '</main>',
    '</body>',
    '</html>',
    '',
  ].join('\n');
}

/** Builds the report and writes it to outFile atomically (a temporary file, then a rename); returns outFile. */
export async function writeReport(runDirs: string[], outFile: string, options: ReportOptions = {}): Promise<string> {
  const html = await buildReport(runDirs, options);
  const dir = path.dirname(path.resolve(outFile));
  if (!fs.existsSync(dir)) fs.mkdirSync(dir, { recursive: true });
  const tmp = path.join(dir, `.${path.basename(outFile)}.tmp-${process.pid}-${Date.now()}`);
  try {
    fs.writeFileSync(tmp, html);
    fs.renameSync(tmp, outFile);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  return outFile;
}

// flowrl report: synthetic run directories (grpo with two seeds, flowrl with one) → one
// self-contained HTML file. Checked as text (sections, labels, table cells, no external
// resources), in headless Chromium (no console errors, every plot drawn) and through the CLI.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import YAML from 'yaml';
import { compareRuns } from '../core-adapters/report/comparison.js';
import { buildReport, writeReport } from '../core-adapters/report/report.js';
import { expectInputErrorAsync, runBuiltFlowrl, tempDir } from './helpers.js';

type Metrics = Record<string, number>;

const VAL_STEPS = [0, 5, 10];
/** Validation accuracy per run at steps 0, 5, 10. */
const ACCURACY: Record<string, number[]> = {
  'grpo-1': [0.2, 0.4, 0.6],
  'grpo-2': [0.2, 0.5, 0.7],
  'flowrl-1': [0.2, 0.45, 0.65],
};
/** Correct samples (of k = 4) per validation prompt at the final step, matching the final accuracy above. */
const FINAL_CORRECT: Record<string, number[]> = {
  'grpo-1': [4, 3, 2, 2, 1],
  'grpo-2': [4, 4, 3, 2, 1],
  'flowrl-1': [4, 3, 3, 2, 1],
};

/** A run directory as the trainer leaves it: config.yaml and metrics.jsonl (steps 0..10, validation at 0, 5, 10). */
function writeRun(root: string, algorithm: string, seed: number, options: { config?: boolean; name?: string } = {}): string {
  const name = options.name ?? `${algorithm}-${seed}`;
  const dir = path.join(root, name);
  fs.mkdirSync(dir, { recursive: true });
  if (options.config !== false) {
    const config = { algorithm: { name: algorithm }, trainer: { experiment_name: name, seed, total_training_steps: 10 } };
    fs.writeFileSync(path.join(dir, 'config.yaml'), YAML.stringify(config));
  }
  const accuracy = ACCURACY[`${algorithm}-${seed}`] ?? [0.1, 0.2, 0.3];
  const validation = (step: number): Metrics => {
    const acc = accuracy[VAL_STEPS.indexOf(step)];
    return {
      'val/accuracy': acc,
      'val/pass@k': Math.min(1, acc + 0.2),
      'val/k': 4,
      'val/pass@1': acc,
      'val/pass@2': Math.min(1, acc + 0.1),
      'val/pass@4': Math.min(1, acc + 0.2),
      'val/distinct_correct': acc * 2,
      'val/correct_entropy': acc * 1.5,
      'val/matching/kl': algorithm === 'flowrl' ? 0.05 * step : 0.1 * step,
      'val/matching/entropy': 1 - 0.05 * step,
    };
  };
  const lines: Metrics[] = [{ step: 0, ...validation(0) }];
  for (let step = 1; step <= 10; step++) {
    const m: Metrics = {
      step,
      'critic/score/mean': 0.05 * step + 0.01 * seed,
      'response_length/mean': 20 + step,
      'actor/grad_norm': 1 / step,
      'perf/throughput': 100 + 10 * step,
      'timing_s/step': 0.5,
      'training/global_step': step,
    };
    if (algorithm === 'flowrl') {
      m['actor/final_loss'] = 2 - 0.1 * step;
      m['actor/log_z'] = 0.3 * step;
      m['actor/importance_weight'] = 1 + 0.01 * step;
    } else {
      m['actor/pg_loss'] = 0.5 - 0.02 * step;
    }
    if (VAL_STEPS.includes(step)) Object.assign(m, validation(step), { 'timing_s/testing': 0.1 });
    lines.push(m);
  }
  fs.writeFileSync(path.join(dir, 'metrics.jsonl'), lines.map((l) => JSON.stringify(l) + '\n').join(''));
  const correct = FINAL_CORRECT[`${algorithm}-${seed}`];
  if (correct) {
    const records = correct.map((c, prompt) => ({ step: 10, prompt, hash: `p${prompt}`, k: 4, correct: c, distinct: Math.min(c, 2), entropy: c > 1 ? Math.LN2 : 0, matching: matchingRecord(algorithm, prompt) }));
    fs.writeFileSync(path.join(dir, 'val_prompts.jsonl'), records.map((r) => JSON.stringify(r) + '\n').join(''));
  }
  return dir;
}

/** Prompt p's correct set: three answers; the reference spreads prompt p less evenly the larger p. */
const ANSWERS = ['1+2', '2+1', '3*1'];
function matchingRecord(algorithm: string, prompt: number) {
  const ref = [0.4 + 0.1 * prompt, 0.35 - 0.05 * prompt, 0.25 - 0.05 * prompt];
  const shares = algorithm === 'flowrl' ? ref : [0.9, 0.1, 0];
  const entropy = (p: number[]) => -p.reduce((h, x) => (x > 0 ? h + x * Math.log(x) : h), 0);
  const kl = shares.reduce((d, x, i) => (x > 0 ? d + x * Math.log(x / ref[i]) : d), 0);
  return { exact: true, kl, tv: 0, entropy: entropy(shares), ref_entropy: entropy(ref), mass: 0.9, ref_mass: 0.2, answers: ANSWERS, shares, ref_shares: ref };
}

const ALL_PLOTS = [
  'plot-reward',
  'plot-val-accuracy',
  'plot-val-pass-at-k',
  'plot-val-distinct-correct',
  'plot-val-correct-entropy',
  'plot-val-matching-kl',
  'plot-val-matching-entropy',
  'plot-response-length',
  'plot-actor-loss',
  'plot-log-z',
  'plot-importance-weight',
  'plot-grad-norm',
  'plot-throughput',
];
const VALIDATION_PLOTS = ['plot-val-accuracy', 'plot-val-pass-at-k', 'plot-val-distinct-correct', 'plot-val-correct-entropy', 'plot-val-matching-kl', 'plot-val-matching-entropy'];

function section(html: string, id: string): string {
  const match = new RegExp(`<section id="${id}"[^>]*>([\\s\\S]*?)</section>`).exec(html);
  expect(match, `section #${id}`).to.not.equal(null);
  return match![1];
}

function count(text: string, pattern: RegExp): number {
  return (text.match(pattern) ?? []).length;
}

/** The text of the cell `key` in the row of run `label` of the runs table. */
function runCell(html: string, label: string, key: string): string {
  const table = /<table id="summary-runs">([\s\S]*?)<\/table>/.exec(html)![1];
  const row = table.split('<tr>').find((r) => r.includes(`<th scope="row" data-key="run">${label}</th>`));
  expect(row, `row of ${label}`).to.not.equal(undefined);
  const cell = new RegExp(`<td data-key="${key.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}"[^>]*>([^<]*)</td>`).exec(row!);
  expect(cell, `${label} ${key}`).to.not.equal(null);
  return cell![1];
}

describe('flowrl report', () => {
  let root: string;
  let runs: string[];
  let html: string;

  before(async () => {
    root = tempDir('flowrl-report-');
    runs = [writeRun(root, 'grpo', 1), writeRun(root, 'grpo', 2), writeRun(root, 'flowrl', 1)];
    html = await buildReport(runs, { title: 'GRPO vs FlowRL' });
  });

  it('has one section per plot, each with an SVG chart, and a mean ± spread chart for validation metrics', () => {
    expect(html.startsWith('<!DOCTYPE html>')).to.equal(true);
    expect(html).to.include('<title>GRPO vs FlowRL</title>');
    for (const id of ALL_PLOTS) {
      const body = section(html, id);
      const expected = VALIDATION_PLOTS.includes(id) ? 2 : 1;
      expect(count(body, /<svg[\s>]/g), `${id} svgs`).to.equal(expected);
      expect(body, id).to.not.include('no run logged');
    }
    // ... the pass@k curves, and the correct-answer shares of four prompts (of five).
    expect(count(html, /<svg[\s>]/g)).to.equal(ALL_PLOTS.length + VALIDATION_PLOTS.length + 1 + 4);
    expect(section(html, 'plot-val-accuracy')).to.include('grpo (2 runs)');
    expect(section(html, 'plot-val-pass-at-k')).to.include('<h2>pass@k (k = 4) <code>val/pass@k</code></h2>');
    // FlowRL-only metrics name the runs that did not log them.
    expect(section(html, 'plot-log-z')).to.include('not logged by grpo seed 1, grpo seed 2');
  });

  it('labels runs by algorithm and seed, with a fixed colour per run in every plot', () => {
    for (const label of ['grpo seed 1', 'grpo seed 2', 'flowrl seed 1']) {
      expect(html).to.include(`<th scope="row" data-key="run">${label}</th>`);
      expect(section(html, 'plot-reward')).to.include(label);
    }
    // The legend lists only the runs drawn (log Z: flowrl only); the note names the others.
    expect(section(html, 'plot-log-z').split('<p class="note">')[0]).to.not.include('grpo seed 2');
  });

  it('fills the summary tables with the computed numbers', () => {
    expect(runCell(html, 'grpo seed 1', 'algorithm')).to.equal('grpo');
    expect(runCell(html, 'grpo seed 1', 'steps')).to.equal('10');
    expect(runCell(html, 'grpo seed 1', 'val/accuracy@before')).to.equal('0.200');
    expect(runCell(html, 'grpo seed 1', 'val/accuracy@after')).to.equal('0.600');
    expect(runCell(html, 'grpo seed 2', 'val/pass@k@after')).to.equal('0.900');
    expect(runCell(html, 'flowrl seed 1', 'val/distinct_correct@after')).to.equal('1.300');
    expect(runCell(html, 'flowrl seed 1', 'val/correct_entropy@after')).to.equal('0.975');
    // Throughput 110..200 over steps 1..10; ten steps of 0.5 s.
    expect(runCell(html, 'flowrl seed 1', 'perf/throughput@mean')).to.equal('155.0');
    expect(runCell(html, 'grpo seed 2', 'timing_s/step@sum')).to.equal('5.0 s');
    // Per algorithm: grpo has two seeds (final accuracy 0.6 and 0.7), flowrl one (no row).
    const algorithms = /<table id="summary-algorithms">([\s\S]*?)<\/table>/.exec(html)![1];
    expect(algorithms).to.include('<th scope="row" data-key="algorithm">grpo</th>');
    expect(algorithms).to.not.include('data-key="algorithm">flowrl<');
    expect(algorithms).to.match(/data-key="val\/accuracy"[^>]*>0\.650 ± 0\.071</);
  });

  it('draws pass@k against k (log2 axis) from the final validation, one line per algorithm', () => {
    const body = section(html, 'plot-pass-at-k-curve');
    expect(count(body, /<svg[\s>]/g)).to.equal(1);
    expect(body).to.include('grpo (2 runs)').and.to.include('flowrl (1 run)');
    // The x axis is labelled at k = 1, 2, 4.
    for (const k of ['1', '2', '4']) expect(body).to.match(new RegExp(`<text[^>]*>${k}</text>`));
    expect(html).to.not.include('<section id="comparison">');
  });

  describe("flowrl compare's statistics", () => {
    let compared: string;
    before(async () => {
      const comparison = compareRuns([
        { name: 'grpo', dirs: runs.slice(0, 2) },
        { name: 'flowrl', dirs: runs.slice(2) },
      ]);
      compared = await buildReport(runs, { comparison });
    });

    /** The summary cell of `group` for metric `key`. */
    function summaryCell(group: string, key: string): { text: string; attributes: string } {
      const table = /<table id="comparison-summary">([\s\S]*?)<\/table>/.exec(compared)![1];
      const cell = new RegExp(`<td data-group="${group}" data-key="${key}"([^>]*)>([^<]*)</td>`).exec(table);
      expect(cell, `${group} ${key}`).to.not.equal(null);
      return { attributes: cell![1], text: cell![2] };
    }

    it('shows each config with the mean and 95 % t interval over seeds (n/a for one seed)', () => {
      expect(compared).to.include('<a href="#comparison">Comparison</a>');
      const head = /<table id="comparison-summary">[\s\S]*?<thead>([\s\S]*?)<\/thead>/.exec(compared)![1];
      expect(head).to.include('>grpo (2 seeds)<').and.to.include('>flowrl (1 seed)<');
      // grpo: final accuracy 0.6 and 0.7: s = 0.0707, half-width t_{0.975,1} · s/√2 = 12.706 · 0.05.
      expect(summaryCell('grpo', 'val/accuracy').text).to.equal('0.650 [0.015, 1.285]');
      expect(summaryCell('grpo', 'val/pass@2').text).to.equal('0.750 [0.115, 1.385]');
      expect(summaryCell('grpo', 'val/accuracy@before').text).to.equal('0.200 [0.200, 0.200]');
      expect(summaryCell('flowrl', 'val/accuracy').text).to.equal('0.650 (CI n/a)');
      expect(summaryCell('flowrl', 'val/accuracy').attributes).to.include('data-mean="0.65"').and.to.not.include('data-low');
      const summary = /<table id="comparison-summary">([\s\S]*?)<\/table>/.exec(compared)![1];
      const rows = [...summary.matchAll(/<th scope="row" data-key="([^"]+)">([^<]*)<\/th>/g)].map((m) => m[2]);
      expect(rows).to.deep.equal(['accuracy at step 0', 'Avg@4 (accuracy)', 'pass@1', 'pass@2', 'pass@4', 'distinct correct', 'correct entropy', 'entropy over all correct', 'KL to ref (correct set)']);
      expect(summaryCell('flowrl', 'val/matching/kl').text).to.equal('0.500 (CI n/a)');
    });

    it('shows the paired differences against the first config, paired over the shared seed', () => {
      const table = /<table id="comparison-paired">([\s\S]*?)<\/table>/.exec(compared)![1];
      expect(table).to.include('flowrl - grpo: seeds 1, 5 prompts');
      const row = /<tr data-pair="flowrl - grpo" data-key="val\/accuracy"([^>]*)>([\s\S]*?)<\/tr>/.exec(table);
      expect(row).to.not.equal(null);
      // Seed 1's prompts: flowrl 13 of 20 correct samples, grpo 12.
      expect(Number(/data-difference="([^"]+)"/.exec(row![1])![1])).to.be.closeTo(0.05, 1e-12);
      expect(row![2]).to.include('<td class="num">+0.050</td>').and.to.include('n/a (one seed)');
      expect(row![1]).to.include('data-significant="false"').and.to.not.include('data-t-low');
      // Paired KL from the per-prompt records: FlowRL keeps the reference's shares (KL 0), grpo does not.
      const kl = /<tr data-pair="flowrl - grpo" data-key="val\/matching\/kl"([^>]*)>/.exec(table);
      const grpoKl = [0, 1, 2, 3, 4].reduce((total, p) => total + matchingRecord('grpo', p).kl, 0) / 5;
      expect(Number(/data-difference="([^"]+)"/.exec(kl![1])![1])).to.be.closeTo(-grpoKl, 1e-12);
      // The pass@k curves follow the compared configs.
      expect(section(compared, 'plot-pass-at-k-curve')).to.include('grpo (2 runs)').and.to.include('One line per config');
    });
  });

  it('references no external resource (only the SVG namespaces)', () => {
    const withoutNamespaces = html.replace(/xmlns(:\w+)?="[^"]*"/g, '');
    expect(withoutNamespaces).to.not.match(/https?:\/\//);
    expect(html).to.not.match(/<script|<img|<link rel="stylesheet"|@import|url\((?!#)/i);
  });

  it('replaces a plot no run has data for by a note', async () => {
    const grpoOnly = await buildReport(runs.slice(0, 2));
    for (const [id, key] of [
      ['plot-log-z', 'actor/log_z'],
      ['plot-importance-weight', 'actor/importance_weight'],
    ]) {
      const body = section(grpoOnly, id);
      expect(body).to.include(`no run logged ${key}`);
      expect(body).to.not.include('<svg');
    }
    expect(section(grpoOnly, 'plot-actor-loss')).to.include('<svg');
    expect(grpoOnly).to.not.include('flowrl seed 1');
  });

  it('names runs by directory without config.yaml and disambiguates equal labels', async () => {
    const other = tempDir('flowrl-report-labels-');
    const a = writeRun(other, 'grpo', 1, { name: 'first' });
    const b = writeRun(other, 'grpo', 1, { name: 'second' });
    const c = writeRun(other, 'ppo', 3, { config: false, name: 'bare-run' });
    const out = await buildReport([a, b, c]);
    expect(out).to.include('>grpo seed 1 (first)<');
    expect(out).to.include('>grpo seed 1 (second)<');
    expect(out).to.include('<th scope="row" data-key="run">bare-run</th>');
  });

  it('writes the file atomically (no temporary file left behind)', async () => {
    const dir = tempDir('flowrl-report-out-');
    const file = path.join(dir, 'nested', 'report.html');
    expect(await writeReport(runs, file)).to.equal(file);
    expect(fs.readFileSync(file, 'utf8')).to.include('<section id="plot-reward"');
    expect(fs.readdirSync(path.dirname(file))).to.deep.equal(['report.html']);
  });

  describe('bad input', () => {
    it('a run directory that does not exist', async () => {
      const missing = path.join(root, 'nope');
      await expectInputErrorAsync(buildReport([runs[0], missing]), missing, 'does not exist');
    });

    it('a directory without metrics.jsonl', async () => {
      const empty = path.join(root, 'empty');
      fs.mkdirSync(empty, { recursive: true });
      await expectInputErrorAsync(buildReport([empty]), path.join(empty, 'metrics.jsonl'));
    });

    it('a metrics.jsonl line that is not JSON, or has no step', async () => {
      const bad = path.join(root, 'bad');
      fs.mkdirSync(bad, { recursive: true });
      const file = path.join(bad, 'metrics.jsonl');
      fs.writeFileSync(file, '{"step": 0, "val/accuracy": 0.1}\n\n{"step": 1, "critic/score/mean": 0.\n');
      await expectInputErrorAsync(buildReport([bad]), file, 'line 3', 'not valid JSON');
      fs.writeFileSync(file, '{"step": 0}\n{"critic/score/mean": 0.5}\n');
      await expectInputErrorAsync(buildReport([bad]), file, 'line 2', 'step');
    });

    it('no run directories', async () => {
      await expectInputErrorAsync(buildReport([]), 'no run directories');
    });
  });

  describe('the CLI', () => {
    it('writes report.html into the first run directory and prints its path; a missing run directory exits 2', async () => {
      const missing = path.join(root, 'does-not-exist');
      const [ok, bad] = await Promise.all([runBuiltFlowrl(['report', ...runs]), runBuiltFlowrl(['report', missing, '--out', path.join(root, 'x.html')])]);
      expect(ok.status, ok.stderr).to.equal(0);
      const out = path.join(runs[0], 'report.html');
      expect(ok.stdout.trim()).to.equal(out);
      expect(fs.readFileSync(out, 'utf8')).to.include('<section id="plot-val-accuracy"');
      expect(bad.status, bad.stderr).to.equal(2);
      expect(bad.stderr).to.include(missing);
      expect(bad.stderr).to.not.match(/\n\s+at /);
      expect(fs.existsSync(path.join(root, 'x.html'))).to.equal(false);
    });
  });

  describe('in headless Chromium', () => {
    // Debian's chromium, or Ubuntu's chromium-browser (scripts/test-prerequisites.mjs looks in the same places).
    const CHROMIUM = process.env.FLOWRL_CHROMIUM ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => fs.existsSync(p)) ?? '/usr/bin/chromium';

    it('shows every plot as an SVG with line marks and logs no console error', async function () {
      this.timeout(60_000);
      if (!fs.existsSync(CHROMIUM)) {
        throw new Error(`${CHROMIUM} not found: this test opens the report in Debian's Chromium; install it with \`apt-get install chromium\` (or set FLOWRL_CHROMIUM)`);
      }
      const file = path.join(tempDir('flowrl-report-browser-'), 'report.html');
      await writeReport(runs, file, { comparison: compareRuns([{ name: 'grpo', dirs: runs.slice(0, 2) }, { name: 'flowrl', dirs: runs.slice(2) }]) });
      const { chromium } = await import('playwright-core');
      const browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
      });
      try {
        const page = await browser.newPage();
        const problems: string[] = [];
        const requests: string[] = [];
        page.on('console', (msg) => {
          if (msg.type() === 'error' || msg.type() === 'warning') problems.push(`console ${msg.type()}: ${msg.text()}`);
        });
        page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
        page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()}`));
        page.on('request', (r) => requests.push(r.url()));
        await page.goto(pathToFileURL(file).href, { waitUntil: 'load' });
        const sections = await page.evaluate((ids: string[]) => {
          return ids.map((id) => {
            const el = document.getElementById(id);
            const svg = el?.querySelector('svg');
            const box = svg?.getBoundingClientRect();
            const lines = svg ? [...svg.querySelectorAll('g.mark-line path, line')].filter((p) => p.tagName === 'line' || (p.getAttribute('d') ?? '').length > 2) : [];
            return { id, found: !!el, svg: !!svg, lines: lines.length, width: box?.width ?? 0, height: box?.height ?? 0 };
          });
        }, ALL_PLOTS);
        for (const s of sections) {
          expect(s.found, `#${s.id} present`).to.equal(true);
          expect(s.svg, `#${s.id} has an <svg>`).to.equal(true);
          expect(s.lines, `#${s.id} line marks`).to.be.greaterThan(0);
          expect(s.width, `#${s.id} width`).to.be.greaterThan(100);
          expect(s.height, `#${s.id} height`).to.be.greaterThan(100);
        }
        const bands = await page.evaluate(() => document.querySelectorAll('figure.spread svg g.mark-area path').length);
        expect(bands, 'min–max bands').to.be.greaterThan(0);
        // pass@k curves: one drawn line per config, a band for grpo (two seeds), both in the legend.
        const curve = await page.evaluate(() => {
          const svg = document.querySelector('#plot-pass-at-k-curve svg')!;
          const box = svg.getBoundingClientRect();
          return {
            lines: [...svg.querySelectorAll('g.mark-line path')].filter((p) => (p.getAttribute('d') ?? '').length > 2 && p.getBoundingClientRect().width > 20).length,
            bands: [...svg.querySelectorAll('g.mark-area path')].filter((p) => (p.getAttribute('d') ?? '').length > 2).length,
            legend: [...svg.querySelectorAll('g.role-legend text')].map((t) => t.textContent),
            width: box.width,
          };
        });
        expect(curve.lines, 'pass@k lines').to.equal(2);
        expect(curve.bands, 'pass@k interval bands').to.equal(1);
        expect(curve.legend).to.include.members(['grpo (2 runs)', 'flowrl (1 run)']);
        expect(curve.width).to.be.greaterThan(100);
        // Correct-answer shares: per prompt, a bar per answer for the reference and each config.
        const shares = await page.evaluate(() =>
          [...document.querySelectorAll('#correct-answer-shares figure.answer-shares')].map((figure) => {
            const svg = figure.querySelector('svg')!;
            return {
              prompt: figure.getAttribute('data-prompt'),
              bars: [...svg.querySelectorAll('g.mark-rect path')].filter((p) => p.getBoundingClientRect().height > 0.5).length,
              legend: [...svg.querySelectorAll('g.role-legend text')].map((t) => t.textContent),
              axis: [...svg.querySelectorAll('g.role-axis-label text')].map((t) => t.textContent),
              width: svg.getBoundingClientRect().width,
            };
          }),
        );
        // The reference spreads prompt 0 most evenly; prompt 4 is left out.
        expect(shares.map((s) => s.prompt)).to.deep.equal(['0', '1', '2', '3']);
        for (const s of shares) {
          expect(s.legend).to.include.members(['reference (base)', 'grpo (2 runs)', 'flowrl (1 run)']);
          expect(s.axis).to.include.members(ANSWERS);
          // 3 answers x 3 series, less grpo's empty bar for the third answer.
          expect(s.bars, `prompt ${s.prompt} bars`).to.equal(8);
          expect(s.width).to.be.greaterThan(100);
        }
        const comparison = await page.evaluate(() => document.querySelectorAll('#comparison-summary tbody tr, #comparison-paired tbody tr').length);
        expect(comparison, 'comparison table rows').to.be.greaterThan(10);
        expect(problems).to.deep.equal([]);
        expect(requests.filter((u) => !u.startsWith('file:') && !u.startsWith('data:'))).to.deep.equal([]);
      } finally {
        await browser.close();
      }
    });
  });
});

// One async-comparison run as a TSV line: mode, seed, wall_s, steps, val accuracy, pass@8 (from the
// `flowrl eval` JSON), correct training samples per wall second (sum over steps of
// critic/score/mean x batch samples, over the process's wall time), mean training score, and the
// staleness metrics' means over steps (training/off_policy/trajectory_staleness/mean and
// _worst/mean, their max over steps, and rollout/staleness's mean, the one-step-off
// run's own staleness; NA when the run logs none), then the mean gen and step times, and the
// rollout's failure counters summed over steps (rollout/ejections, rollout/retries,
// rollout/update_redraws, training/off_policy/dropped_groups: the last value, it is cumulative).
//
// usage: node async_summary.mjs MODE SEED WALL_S RUN_DIR EVAL.json SAMPLES_PER_STEP
import fs from 'node:fs';

const [mode, seed, wallArg, run, evaluation, perStepArg] = process.argv.slice(2);
if (!perStepArg) {
  console.error('usage: node async_summary.mjs MODE SEED WALL_S RUN_DIR EVAL.json SAMPLES_PER_STEP');
  process.exit(2);
}
const wall = Number(wallArg), perStep = Number.parseInt(perStepArg, 10);
const steps = fs.readFileSync(`${run}/metrics.jsonl`, 'utf8').split('\n').filter((l) => l.trim())
  .map((l) => JSON.parse(l)).filter((m) => 'critic/score/mean' in m);
const e = JSON.parse(fs.readFileSync(evaluation, 'utf8'));
const mean = (v) => v.reduce((a, b) => a + b, 0) / v.length;
const sum = (v) => v.reduce((a, b) => a + b, 0);
const max = (v) => Math.max(...v);
const last = (v) => v[v.length - 1];
const scores = steps.map((m) => m['critic/score/mean']);
const correct = sum(scores) * perStep;

function overSteps(key, agg, digits = 3) {
  const values = steps.filter((m) => key in m).map((m) => m[key]);
  return values.length ? agg(values).toFixed(digits) : 'NA';
}

console.log([mode, seed, wall.toFixed(1), String(steps.length), e['val/accuracy'].toFixed(4), e['val/pass@8'].toFixed(4),
  (correct / wall).toFixed(3), mean(scores).toFixed(4),
  overSteps('training/off_policy/trajectory_staleness/mean', mean),
  overSteps('training/off_policy/trajectory_staleness/max', max),
  overSteps('training/off_policy/trajectory_staleness_worst/mean', mean),
  overSteps('training/off_policy/trajectory_staleness_worst/max', max),
  overSteps('rollout/staleness', mean),
  overSteps('timing_s/gen', mean), overSteps('timing_s/step', mean),
  overSteps('rollout/ejections', sum, 0), overSteps('rollout/retries', sum, 0),
  overSteps('rollout/update_redraws', sum, 0), overSteps('training/off_policy/dropped_groups', last, 0)].join('\t'));

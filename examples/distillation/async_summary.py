"""One async-comparison run as a TSV line: mode, seed, wall_s, steps, val accuracy, pass@8 (from the
`flowrl eval` JSON), correct training samples per wall second (sum over steps of
critic/score/mean x batch samples, over the process's wall time), mean training score, and the
staleness metrics' means over steps (training/off_policy/trajectory_staleness/mean and
_worst/mean, their max over steps, and rollout/staleness's mean, the one-step-off
run's own staleness; NA when the run logs none).

usage: python3 async_summary.py MODE SEED WALL_S RUN_DIR EVAL.json SAMPLES_PER_STEP
"""
import json
import sys

mode, seed, wall, run, evaluation, per_step = sys.argv[1:7]
wall, per_step = float(wall), int(per_step)
steps = [m for m in map(json.loads, open(f'{run}/metrics.jsonl')) if 'critic/score/mean' in m]
e = json.load(open(evaluation))
correct = sum(m['critic/score/mean'] for m in steps) * per_step


def over_steps(key, agg):
    values = [m[key] for m in steps if key in m]
    return f'{agg(values):.3f}' if values else 'NA'


mean = lambda v: sum(v) / len(v)
print('\t'.join([mode, seed, f'{wall:.1f}', str(len(steps)), f"{e['val/accuracy']:.4f}", f"{e['val/pass@8']:.4f}",
                 f'{correct / wall:.3f}', f"{mean([m['critic/score/mean'] for m in steps]):.4f}",
                 over_steps('training/off_policy/trajectory_staleness/mean', mean),
                 over_steps('training/off_policy/trajectory_staleness/max', max),
                 over_steps('training/off_policy/trajectory_staleness_worst/mean', mean),
                 over_steps('training/off_policy/trajectory_staleness_worst/max', max),
                 over_steps('rollout/staleness', mean),
                 over_steps('timing_s/gen', mean), over_steps('timing_s/step', mean)]))

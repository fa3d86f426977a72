#!/usr/bin/env bash
# Reproduces examples/distillation end to end on one machine (written for the 2-core box):
#   1. teacher: examples/countdown/base-model + 100 GRPO steps (grpo.yaml), exported as an HF dir
#   2. student: hidden 64, 2 layers, SFT'd from random weights for 300 steps on the training rows' solutions
#   3. `flowrl serve` the teacher; sample it on the training prompts; keep the correct samples
#   4. three arms from the student at equal wall time (STEPS_* below, measured on this machine for
#      about BUDGET seconds of process wall time each), SEEDS seeds each, interleaved by seed:
#      opd (GKD from the served teacher), sft-teacher (SFT on the kept teacher samples), grpo (RL alone)
#   5. every final model evaluated by `flowrl eval` on the 512 held-out validation prompts
#      (8 samples each at temperature 0.6, the same evaluation seed for all), then stats.mjs
# Needs only bash, curl and Node (the helper scripts are Node modules; the project's dist/ built).
# Models and runs go to $WORK (default /tmp/distill-work), never into the repository.
# Usage: examples/distillation/run.sh [distill|async|all]   (default distill)
set -euo pipefail
cd "$(dirname "$0")"
WORK=${WORK:-/tmp/distill-work}
SEEDS=${SEEDS:-"1 2 3 4 5"}
STEPS_OPD=${STEPS_OPD:-40}
STEPS_GRPO=${STEPS_GRPO:-158}
STEPS_SFT=${STEPS_SFT:-1500}
PORT=${PORT:-8011}
FLOWRL="node ../../bin/flowrl.js"
WHAT=${1:-distill}
mkdir -p "$WORK"
PIDS=()
cleanup() {  # stops the servers this script started, and waits for them (their ports are reused)
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 143' INT TERM

serve() {  # serve MODEL PORT [FLAGS]: a background flowrl serve, waited for
  # a server left on the port (another run's, with other weights) would answer in its place
  if curl -sf "http://127.0.0.1:$2/health" > /dev/null; then echo "port $2 already has a server: stop it or choose other ports" >&2; exit 1; fi
  $FLOWRL serve --model "$1" --port "$2" --max-logprobs 20 ${3:-} > "$WORK/serve-$2.log" 2>&1 &
  local pid=$!; PIDS+=($pid)
  for _ in $(seq 60); do
    kill -0 "$pid" 2>/dev/null || { echo "server on $2 exited: $(tail -3 "$WORK/serve-$2.log")" >&2; exit 1; }
    curl -sf "http://127.0.0.1:$2/health" > /dev/null && return 0; sleep 1
  done
  echo "server on $2 did not start" >&2; exit 1
}

evaluate() {  # evaluate MODEL_DIR OUT.json
  $FLOWRL eval student-grpo.yaml actor_rollout_ref.model.path="$1" trainer.default_local_dir="$WORK/eval-scratch" > "$2" 2> "$2.err"
}

timed() {  # timed LOG cmd...: runs cmd, prints its wall seconds
  local t0 t1; t0=$(date +%s.%N)
  "${@:2}" > "$1" 2>&1 || { local rc=$?; echo "exit $rc: ${*:2} (log $1)" >&2; return $rc; }
  t1=$(date +%s.%N)
  node -e "console.log(($t1 - $t0).toFixed(1))"
}

row() {  # row ARM SEED WALL STEPS EVAL.json
  node -e "const m = JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8')); console.log([...process.argv.slice(2), m['val/accuracy'], m['val/pass@8']].join('\t'))" "$5" "$1" "$2" "$3" "$4"
}

if [ "$WHAT" = distill ] || [ "$WHAT" = all ]; then
  # 1. the teacher
  if [ ! -f "$WORK/teacher/model.safetensors" ]; then
    (cd ../countdown && node ../../bin/flowrl.js train grpo.yaml trainer.total_training_steps=100 trainer.test_freq=100 \
      trainer.save_freq=100 trainer.seed=1 trainer.default_local_dir="$WORK/teacher-run") > "$WORK/teacher.log" 2>&1
    $FLOWRL export "$WORK/teacher-run/checkpoints/global_step_100" "$WORK/teacher"
  fi
  # 2. the student
  [ -f "$WORK/student-base/model.safetensors" ] || $FLOWRL sft student-sft.yaml sft.output_dir="$WORK/student-base" > "$WORK/student-sft.log" 2>&1
  evaluate "$WORK/teacher" "$WORK/eval-teacher.json"
  evaluate "$WORK/student-base" "$WORK/eval-student-base.json"
  # 3. the teacher server and its samples
  serve "$WORK/teacher" "$PORT"
  S="$WORK/teacher-samples"; mkdir -p "$S"
  node sample_teacher.mjs "http://127.0.0.1:$PORT" 4 "$S/rows.jsonl" "$S/responses.jsonl"
  $FLOWRL reward "$S/rows.jsonl" --responses "$S/responses.jsonl" --json > "$S/scores.jsonl"
  node keep_correct.mjs "$S/rows.jsonl" "$S/responses.jsonl" "$S/scores.jsonl" "$S/sft.jsonl"
  # 4-5. the arms
  R="$WORK/results.tsv"; printf 'arm\tseed\twall_s\tsteps\tval_accuracy\tpass8\n' > "$R"
  for seed in $SEEDS; do
    d="$WORK/opd-$seed"; rm -rf "$d"
    w=$(timed "$WORK/opd-$seed.log" $FLOWRL train student-opd.yaml trainer.seed=$seed data.seed=$seed \
      trainer.total_training_steps=$STEPS_OPD trainer.default_local_dir="$d" \
      "actor_rollout_ref.model.path=$WORK/student-base" "distillation.teacher_models.teacher.model_path=$WORK/teacher" \
      "distillation.teacher_models.teacher.inference.urls=[http://127.0.0.1:$PORT]")
    evaluate "$d/checkpoints/global_step_$STEPS_OPD/actor" "$d/eval.json"; row opd $seed $w $STEPS_OPD "$d/eval.json" >> "$R"

    d="$WORK/sft-teacher-$seed"; rm -rf "$d"
    w=$(timed "$WORK/sft-teacher-$seed.log" $FLOWRL sft student-sft-teacher.yaml trainer.seed=$seed sft.total_steps=$STEPS_SFT \
      "data.train_files=$S/sft.jsonl" "actor_rollout_ref.model.path=$WORK/student-base" sft.output_dir="$d/model" trainer.default_local_dir="$d")
    evaluate "$d/model" "$d/eval.json"; row sft-teacher $seed $w $STEPS_SFT "$d/eval.json" >> "$R"

    d="$WORK/grpo-$seed"; rm -rf "$d"
    w=$(timed "$WORK/grpo-$seed.log" $FLOWRL train student-grpo.yaml trainer.seed=$seed data.seed=$seed \
      trainer.total_training_steps=$STEPS_GRPO trainer.default_local_dir="$d" "actor_rollout_ref.model.path=$WORK/student-base")
    evaluate "$d/checkpoints/global_step_$STEPS_GRPO/actor" "$d/eval.json"; row grpo $seed $w $STEPS_GRPO "$d/eval.json" >> "$R"
    tail -3 "$R"
  done
  cleanup; PIDS=()
  node stats.mjs "$R" opd sft-teacher grpo | tee "$WORK/results.md"
fi

if [ "$WHAT" = async ] || [ "$WHAT" = all ]; then
  # GRPO on the student with rollouts on two flowrl serve processes (fresh for each run, so every run
  # starts from the student's weights), the trainer on the same 2 cores: sync, one-step-off, async.
  # The modes are interleaved by seed; STEPS_* give each mode about 75-85 s of process wall time here.
  # ASYNC_PORTS: the two servers' ports (default 30111 30112); a port already serving stops the script.
  ASEEDS=${ASEEDS:-"1 2 3"}
  STEPS_SYNC=${STEPS_SYNC:-180}
  STEPS_ONE_STEP_OFF=${STEPS_ONE_STEP_OFF:-210}
  STEPS_ASYNC=${STEPS_ASYNC:-180}
  read -r P1 P2 <<< "${ASYNC_PORTS:-30111 30112}"
  A="$WORK/async-results.tsv"
  printf 'mode\tseed\twall_s\tsteps\tval_accuracy\tpass8\tcorrect_per_s\ttrain_score\tstaleness_mean\tstaleness_max\tstaleness_worst_mean\tstaleness_worst_max\trollout_staleness\tgen_s\tstep_s\tejections\tretries\tupdate_redraws\tdropped_groups\n' > "$A"
  for seed in $ASEEDS; do
    for mode in sync one-step-off async; do
      case $mode in
        sync) steps=$STEPS_SYNC; extra=() ;;
        one-step-off) steps=$STEPS_ONE_STEP_OFF; extra=(trainer.one_step_off_policy=true actor_rollout_ref.rollout.server.max_staleness=1) ;;
        async) steps=$STEPS_ASYNC; extra=(trainer.v1.trainer_mode=separate_async trainer.v1.sampler.max_off_policy_threshold=1 trainer.v1.sampler.max_off_policy_strategy=wait) ;;
      esac
      d="$WORK/async-$mode-$seed"; rm -rf "$d"
      serve "$WORK/student-base" "$P1" "--enable-admin --weights-root $WORK"
      serve "$WORK/student-base" "$P2" "--enable-admin --weights-root $WORK"
      w=$(timed "$d.log" $FLOWRL train async.yaml trainer.seed=$seed data.seed=$seed trainer.total_training_steps=$steps \
        trainer.default_local_dir="$d" "actor_rollout_ref.model.path=$WORK/student-base" \
        "actor_rollout_ref.rollout.server.urls=[http://127.0.0.1:$P1,http://127.0.0.1:$P2]" "${extra[@]}")
      cleanup; PIDS=()
      evaluate "$d/checkpoints/global_step_$steps/actor" "$d/eval.json"
      node async_summary.mjs $mode $seed $w "$d" "$d/eval.json" 128 >> "$A"
      tail -1 "$A"
    done
  done
  node async_table.mjs "$A" | tee "$WORK/async-results.md"
  echo | tee -a "$WORK/async-results.md"
  node stats.mjs <(cut -f1-6 "$A") async sync one-step-off | tee -a "$WORK/async-results.md"
fi

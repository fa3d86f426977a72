#!/bin/sh
# The two baselines of issue 33 (grpo-kl-reward.yaml, grpo-replay.yaml) tuned with the budget
# flowrl-matching had: 22 single-seed trials each, on the collapse prompts at seed 1, 150 steps,
# validated once at the end (64 samples at temperature 1.0), as flowrl-matching's keys were chosen
# (docs/flowrl.md, "Why it collapses"). The rule, fixed before any trial ran: among trials whose
# accuracy is at least 0.94, the lowest KL to the reference over correct answers (val/matching/kl);
# where none reaches 0.94, the lowest KL within 0.03 of the grid's best accuracy (added after eight
# trials, none of which had). The winner's keys go into its yaml and are then reported on fresh
# seeds (compare.sh).
#   sh examples/countdown/collapse/tune-baselines.sh kl-reward   # or: replay
#   npx tsx examples/countdown/collapse/tune-table.ts runs/collapse-tune
# A finished trial (its step-150 checkpoint exists) is skipped, so the script resumes; each trial is
# one collapse/train-run.sh.
set -eu
here=$(dirname "$0")
configs=$(dirname "$here")
grid=${1:?usage: tune-baselines.sh kl-reward|replay}
out=runs/collapse-tune

klr="algorithm.use_kl_in_reward=true algorithm.kl_ctrl.kl_coef"
nostd="algorithm.norm_adv_by_std_in_grpo=false"
seqsum="actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"
cosine="actor_rollout_ref.actor.optim.lr_scheduler_type=cosine"
lr="actor_rollout_ref.actor.optim.lr"
temp="actor_rollout_ref.rollout.temperature"
klloss="algorithm.use_kl_in_reward=false actor_rollout_ref.actor.use_kl_loss=true actor_rollout_ref.actor.kl_loss_type=low_var_kl actor_rollout_ref.actor.kl_loss_coef"
rep="flowrl.replay_samples"
exp="flowrl.explore_temperature"
ref="flowrl.reference_samples"

case "$grid" in
  kl-reward)
    config="$configs/grpo-kl-reward.yaml"
    trials="
k01-coef0.1|$klr=0.1
k02-coef0.2|$klr=0.2
k03-coef0.067|$klr=0.0667
k04-coef0.05|$klr=0.05
k05-coef0.3|$klr=0.3
k06-coef0.5|$klr=0.5
k07-coef0.1-nostd|$klr=0.1 $nostd
k08-coef0.2-nostd|$klr=0.2 $nostd
k09-coef0.05-nostd|$klr=0.05 $nostd
k10-coef0.1-k3|$klr=0.1 algorithm.kl_penalty=low_var_kl
k11-coef0.1-k2|$klr=0.1 algorithm.kl_penalty=mse
k12-coef0.1-seqsum|$klr=0.1 $seqsum
k13-coef0.1-nostd-seqsum|$klr=0.1 $nostd $seqsum
k14-coef0.1-lr2.5e-4|$klr=0.1 $lr=2.5e-4
k15-coef0.1-lr1e-3|$klr=0.1 $lr=1e-3
k16-coef0.1-cosine|$klr=0.1 $cosine
k17-coef0.1-temp1.5|$klr=0.1 $temp=1.5
k18-coef0.1-nostd-temp1.5|$klr=0.1 $nostd $temp=1.5
k19-klloss0.1|$klloss=0.1
k20-klloss0.3|$klloss=0.3
k21-klloss1|$klloss=1.0
k22-coef0.2-nostd-seqsum|$klr=0.2 $nostd $seqsum
"
    ;;
  replay)
    config="$configs/grpo-replay.yaml"
    trials="
r01-rep2-exp2|$rep=2 $exp=2
r02-rep1-exp2|$rep=1 $exp=2
r03-rep3-exp2|$rep=3 $exp=2
r04-rep2-exp1.5|$rep=2 $exp=1.5
r05-rep2-exp3|$rep=2 $exp=3
r06-rep2|$rep=2 $exp=null
r07-exp2|$rep=0 $exp=2
r08-rep2-exp2-ref1|$rep=2 $exp=2 $ref=1
r09-rep2-exp2-nostd|$rep=2 $exp=2 $nostd
r10-rep2-exp2-lr2.5e-4|$rep=2 $exp=2 $lr=2.5e-4
r11-rep2-exp2-cosine|$rep=2 $exp=2 $cosine
r12-rep2-exp2-klr0.1|$rep=2 $exp=2 $klr=0.1
r13-rep2-exp2-klr0.1-nostd|$rep=2 $exp=2 $klr=0.1 $nostd
r14-rep2-exp1.3|$rep=2 $exp=1.3
r15-rep1-exp1.5|$rep=1 $exp=1.5
r16-ref1|$rep=0 $exp=null $ref=1
r17-ref2|$rep=0 $exp=null $ref=2
r18-rep2-exp2-seqsum|$rep=2 $exp=2 $seqsum
r19-rep3-exp3|$rep=3 $exp=3
r20-rep2-exp2-klloss0.1|$rep=2 $exp=2 $klloss=0.1
r21-rep1-ref1-exp2|$rep=1 $exp=2 $ref=1
r22-rep2-exp2-ref1-klr0.1-nostd|$rep=2 $exp=2 $ref=1 $klr=0.1 $nostd
"
    ;;
  *) echo "tune-baselines.sh: unknown grid '$grid' (kl-reward or replay)" >&2; exit 2 ;;
esac

echo "$trials" | while IFS='|' read -r name overrides; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086 # the overrides are words
  sh "$here/train-run.sh" "$config" 1 "$out/$name" $overrides
done

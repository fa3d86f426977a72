#!/bin/bash
# The GPU check: on a machine with a GPU (and no network), from the root of a copy of this checkout
# with .gpu/ beside it (node scripts/gpu-bundle.mjs builds it), measures the webgpu path against
# PyTorch on the same shapes on the same machine:
#   1. the GPU's float32 matmul peak and copy bandwidth through tfjs's kernels (bench --limits);
#   2. the tiny bench (train step, KV-cache sampling) and PyTorch's (scripts/torch_bench.py);
#   3. Qwen2.5-0.5B's shape: a train step and sampling (also with FLOWRL_WEBGPU_FUSED=off: tfjs's
#      own ops), and one whole RL step (LoRA r 16, 8 prompts x 4 samples, 64 + 128 tokens), each
#      beside scripts/torch_model_bench.py on the same job.
# Writes $OUT (default /tmp/gpu-check) /*.json, and summary.md with the figures side by side.
# SIZE=small runs small shapes only (a software driver: lavapipe), to check the check itself.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=$ROOT/.gpu
OUT=${OUT:-/tmp/gpu-check}
SIZE=${SIZE:-full}
mkdir -p "$OUT"
log() { echo "[gpu-check] $*" | tee -a "$OUT/log.txt"; }
started=$(date +%s)
[ -f "$G/flowrl.bundle.mjs" ] || { echo "gpu-check: $G/flowrl.bundle.mjs is missing; run node scripts/gpu-bundle.mjs where npm works and carry .gpu" >&2; exit 2; }
unxz() { xz -dc "$1" 2>/dev/null || python3 -c "import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())" "$1"; }

# Node 20 or later: the machine's, else the carried one.
NODE=$(command -v node || true)
if [ -z "$NODE" ] || [ "$("$NODE" -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  NODE=$OUT/node; [ -x "$NODE" ] || { unxz "$G/node.xz" > "$NODE" && chmod +x "$NODE"; }
fi
log "node $("$NODE" --version) ($NODE)"
DAWN=$G/node_modules/webgpu/dist/linux-x64/dawn.node
[ -f "$DAWN" ] || unxz "$DAWN.xz" > "$DAWN"

# A Vulkan loader (the carried packages, unpacked under $OUT, when the machine has none) and the
# NVIDIA driver's manifest where the container puts it.
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1'; then
  for deb in "$G"/debs/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" "$OUT/vulkan-root"; done
  export LD_LIBRARY_PATH=$OUT/vulkan-root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  log "Vulkan loader from the carried packages"
fi
for dir in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do [ -d "$dir" ] && export LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; done
if [ -z "${VK_DRIVER_FILES:-}" ]; then
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -f "$icd" ] && { export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd; log "Vulkan driver $icd"; break; }
  done
fi
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$OUT/xdg}; mkdir -p "$XDG_RUNTIME_DIR"; chmod 700 "$XDG_RUNTIME_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/[gpu-check] nvidia-smi: /' | tee -a "$OUT/log.txt"

FLOWRL=("$NODE" "$G/flowrl.bundle.mjs")
torch_cuda() { python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }
step() { # name, then the command; its stdout (one JSON line) goes to $OUT/name.json; STEP_TIMEOUT bounds each
  local name=$1; shift
  local t=$(date +%s)
  if timeout "${STEP_TIMEOUT:-300}" "$@" > "$OUT/$name.json" 2>>"$OUT/stderr.txt"; then log "$name: $(( $(date +%s) - t )) s"; else log "$name: FAILED (exit $?; see $OUT/stderr.txt)"; rm -f "$OUT/$name.json"; fi
}
QWEN=$ROOT/examples/local-hf-model/qwen2.5-0.5b-config.json
if [ "$SIZE" = small ]; then
  MODEL=$ROOT/test/fixtures/tiny-qwen2/config.json; MATRIX=(--matrix 256 --limits-mb 16 --rounds 1); TINY=(--steps 1)
  SHAPE=(--batch 2 --seq 32 --sample-prompts 2 --sample-tokens 4 --steps 1); RL=(--prompts 2 --samples 2 --prompt-tokens 8 --response-tokens 8 --lora-rank 4 --micro-batch 2)
  LIMITS=(--matrix 256 --limits-mb 16)
else
  MODEL=$QWEN; MATRIX=(); TINY=(--steps 10)
  SHAPE=(--batch 8 --seq 256 --sample-prompts 8 --sample-tokens 32 --steps 3); RL=(--prompts 8 --samples 4 --prompt-tokens 64 --response-tokens 128 --lora-rank 16 --micro-batch 4)
  LIMITS=()
fi
step limits "${FLOWRL[@]}" bench --limits --backend webgpu --json "${MATRIX[@]}"
step tiny "${FLOWRL[@]}" bench --backend webgpu --json "${TINY[@]}"
step model "${FLOWRL[@]}" bench --model-config "$MODEL" --backend webgpu --json "${SHAPE[@]}" "${LIMITS[@]}"
# The same on tfjs's own ops (no fused programs, LoRA merge or GPU draws): what they change on a GPU.
step model_unfused env FLOWRL_WEBGPU_FUSED=off "${FLOWRL[@]}" bench --model-config "$MODEL" --backend webgpu --json "${SHAPE[@]}" "${LIMITS[@]}"
step rl_step "${FLOWRL[@]}" bench --model-config "$MODEL" --rl-step --backend webgpu --json "${RL[@]}" "${LIMITS[@]}"
if torch_cuda; then
  step torch_tiny python3 "$ROOT/scripts/torch_bench.py" --device cuda "${TINY[@]}"
  step torch_model python3 "$ROOT/scripts/torch_model_bench.py" --config "$MODEL" --device cuda "${SHAPE[@]}"
  step torch_rl_step python3 "$ROOT/scripts/torch_model_bench.py" --config "$MODEL" --rl-step --device cuda "${RL[@]}"
else
  log "PyTorch with CUDA not found: no PyTorch figures"
fi
"$NODE" "$ROOT/scripts/gpu-check-summary.mjs" "$OUT" | tee "$OUT/summary.md"
log "done in $(( $(date +%s) - started )) s; figures in $OUT"

#!/usr/bin/env bash
# The GPU figures of benches/README.md in one run on a lent device machine (MLX's CUDA
# backend, installed by ../shared/gpu/prepare.sh's .gpu/run.sh): each bench under its
# own time limit, its output kept in $OUT (or /tmp/gpu-round). MLX_ENABLE_TF32=0: every
# bench checks its contenders' outputs against each other at float32 tolerances, and
# TF32 matmuls (MLX's CUDA default) would be ~1e-3 off; both sides run with the same
# setting.
#     bash .gpu/run.sh bash benches/gpu_round.sh [gpu|cpu] [seconds per bench scale]
set -uo pipefail
DEV="${1:-gpu}"
SCALE="${2:-1}"
O="${OUT:-/tmp/gpu-round}"
mkdir -p "$O"
export MLX_ENABLE_TF32=0 PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:-}:$PWD:$PWD/benches"
limit() { awk -v s="$1" -v k="$SCALE" 'BEGIN { printf "%d", s * k }'; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  python3 -c "import mlx.core as mx, torch, transformers, numpy; print('mlx', mx.__version__, mx.default_device(), 'torch', torch.__version__, 'transformers', transformers.__version__, 'numpy', numpy.__version__)"
  git log --oneline -1 2>/dev/null; } | tee "$O/versions.txt"
run() {  # name seconds command...
  local name="$1" seconds="$2"; shift 2
  echo "== $name ($seconds s): $*" >"$O/$name.txt"
  local began=$SECONDS
  timeout "$seconds" "$@" >>"$O/$name.txt" 2>"$O/$name.err"
  echo "rc $? after $((SECONDS - began)) s" >>"$O/$name.txt"
  tail -n 25 "$O/$name.txt"
  grep -E "Error|error|Traceback" "$O/$name.err" | tail -n 5
}
# Limits from the device sessions so far (each call 10 minutes at most, 15 in all): the
# delegate bench takes ~75 s a model, the decode bench ~85 s a family, and the training
# bench's compiled mode is left out (its first whole-step trace JIT-compiles for minutes
# on CUDA).
run delegate "$(limit 170)" python3 benches/bench_delegate_memory.py --device "$DEV" --runs 3 \
    --models whisper-encoder,llama-1b-shaped
run decode "$(limit 190)" python3 benches/bench_decode_families.py --device "$DEV" --runs 3 \
    --families llama,whisper
run profile_decode "$(limit 120)" python3 benches/profile_decode_host.py --device "$DEV" \
    --families llama --rounds 3
run train "$(limit 150)" python3 benches/bench_train.py --device "$DEV" --runs 3 --no-compiled
run mlx_gpu "$(limit 90)" python3 benches/bench_mlx_gpu.py --device "$DEV" --runs 3

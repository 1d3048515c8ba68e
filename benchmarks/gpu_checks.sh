#!/usr/bin/env bash
# Every GPU check of treeqa in one run, sized for a short loan of one GPU (~10 minutes):
#   1. the environment (torch, CUDA, device name);
#   2. the GPU tests (tree models and QANet: CPU == GPU, bf16 autocast);
#   3. tree speed: bench_tree.py --device cuda (batch 25, 256 and 1024; goal >= 20,000
#      sentences/s on an H200);
#   4. QANet speed: bench_qanet.py --device cuda --amp bf16, paper config (goal >= 1,500
#      training examples/s on an H200), faithful and naive models side by side.
# Each step has its own time limit and log; a failing step does not stop the others.
#
#   SST=path/to/sst OUT=runs/gpu benchmarks/gpu_checks.sh      # SST: dir with train/dev/test.txt
#
# Needs torch with CUDA, numpy, safetensors, pytest; runs the code of this checkout (src/).
# A smoke test of the script itself on a CPU (small QANet shapes, a few minutes):
#   DEVICE=cpu QANET_ARGS="--steps 1 --warmup 0 --batch 2 --context 60 --question 12" benchmarks/gpu_checks.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
SST=${SST:-${TREEQA_DATA:-../shared/data}/sst}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
QANET_ARGS=${QANET_ARGS:-"--steps 20 --warmup 3"}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SST=$(cd "$SST" && pwd)
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

step() {  # name limit_seconds command...
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc, $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
    tail -n 4 "$OUT/$name.log"
}

step env 60 "$PY" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0))"
step tests 180 "$PY" -m pytest -q -p no:cacheprovider -m gpu -o addopts="" \
    tests/models/test_tree_models.py tests/models/test_qanet.py
step tree 240 "$PY" benchmarks/bench_tree.py --device "$DEVICE" --model tree_lstm \
    --reference-sentences 20 --drift-epochs 5 --large-batch 1024 --data "$SST" --out "$OUT" --json
# shellcheck disable=SC2086  # QANET_ARGS is a list of options
step qanet 240 "$PY" benchmarks/bench_qanet.py --device "$DEVICE" --amp bf16 $QANET_ARGS --json

#!/usr/bin/env bash
# Every GPU check of treeqa in one run, sized for a short loan of one GPU (the default steps'
# time limits add up to 12 minutes; on one H200 they took 101 s, with qanet_b128 and tree_gru
# 153 s, qa_train + qa_eval with QA_MINUTES=3 206 s, qanet_compiled 157 s):
#   1. the environment (torch, CUDA, device name);
#   2. the GPU tests (tree models and QANet: CPU == GPU, bf16 autocast, fp16 with a loss scaler;
#      the health monitor on a GPU, and its device-idle finding on a corpus script);
#   3. tree speed: bench_tree.py --device cuda (batch 25, 256 and 1024; goal >= 20,000
#      sentences/s on an H200);
#   4. QANet speed: bench_qanet.py --device cuda --amp bf16, paper config (goal >= 1,500
#      training examples/s on an H200), faithful and naive models side by side.
#   4b. qanet_compiled (only when named in STEPS): the faithful model under torch.compile
#      (compiling QANet took 7.5 minutes on 2 CPU cores, about 2 on the H200 machine).
#   4c. qanet_b128 (only when named in STEPS): the faithful model at batch 128, to see how much
#      of batch 32's step is launch overhead rather than arithmetic.
#   4d. tree_gru (only when named in STEPS): bench_tree.py for the Tree-GRU.
#   4e. qanet_variants (only when named in STEPS): what might lift batch 32 past its host-bound
#      rate: the fused Adam kernel, eager; then CUDA graphs (compile mode reduce-overhead) with it.
#   5. QANet training (only when named in STEPS): the paper config on prepared SQuAD v1.1 for
#      QA_MINUTES of wall-clock time, dev EM/F1 on 2,000 questions every 1,000 steps, then the
#      best checkpoint scored on every dev question (qa_train, qa_eval).
#   5b. qa_train_graphs (only when named in STEPS): the same training through CUDA graphs
#      (--train.compile=reduce-overhead, batches padded to multiples of 64 tokens so that a few
#      shapes are recorded), into $OUT/qanet_graphs; its metrics.jsonl's examples_per_s beside
#      qa_train's say what the graphs give (compiling takes the first minutes of the budget).
# Each step has its own time limit and log; a failing step does not stop the others.
#
#   SST=path/to/sst OUT=runs/gpu benchmarks/gpu_checks.sh      # SST: dir with train/dev/test.txt
#   STEPS="env qa_unpack qa_train qa_eval" QA_PACK=runs/gpu-data/squad_v1.tar.xz QA_MINUTES=6 benchmarks/gpu_checks.sh
#
# QA_PACK is the prepared directory as a .tar.xz (`benchmarks/gpu_pack.sh` makes it with SST,
# ~35 MB in all: the GPU machine has neither the data nor spaCy to prepare it).
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
STEPS=${STEPS:-"env smi tests tree qanet"}
QA_MINUTES=${QA_MINUTES:-6}
# Extra config overrides for qa_train: a small model for a CPU smoke test, or
# --train.compile=default to train through torch.compile (after minutes of compiling).
QA_ARGS=${QA_ARGS:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
case " $STEPS " in *" tree "* | *" tree_gru "*) SST=$(cd "$SST" && pwd) ;; esac
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

step() {  # name limit_seconds command...; runs only when STEPS names it
    local name=$1 limit=$2
    shift 2
    case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc, $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
    tail -n 4 "$OUT/$name.log"
}

step env 60 "$PY" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0))"
step smi 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
step tests 180 "$PY" -m pytest -q -p no:cacheprovider -m gpu -o addopts="" \
    tests/models/test_tree_models.py tests/models/test_qanet.py tests/health/test_monitor.py \
    tests/train/test_amp.py tests/health/test_corpus.py
step tree 240 "$PY" benchmarks/bench_tree.py --device "$DEVICE" --model tree_lstm \
    --reference-sentences 20 --drift-epochs 5 --large-batch 1024 --data "$SST" --out "$OUT" --json
# shellcheck disable=SC2086  # QANET_ARGS is a list of options
step qanet 240 "$PY" benchmarks/bench_qanet.py --device "$DEVICE" --amp bf16 $QANET_ARGS --json
# shellcheck disable=SC2086
step qanet_compiled 480 "$PY" benchmarks/bench_qanet.py --device "$DEVICE" --amp bf16 $QANET_ARGS \
    --warmup 3 --compile --only faithful
# shellcheck disable=SC2086
step qanet_b128 180 "$PY" benchmarks/bench_qanet.py --device "$DEVICE" --amp bf16 $QANET_ARGS \
    --batch 128 --only faithful
# shellcheck disable=SC2086
step qanet_variants 480 bash -c "$PY benchmarks/bench_qanet.py --device $DEVICE --amp bf16 $QANET_ARGS \
    --only faithful --fused-adam && $PY benchmarks/bench_qanet.py --device $DEVICE --amp bf16 \
    $QANET_ARGS --only faithful --fused-adam --compile reduce-overhead"
step tree_gru 240 "$PY" benchmarks/bench_tree.py --device "$DEVICE" --model tree_gru \
    --reference-sentences 20 --drift-epochs 5 --large-batch 1024 --data "$SST" --out "$OUT" --json
QA_DATA="$OUT/data/squad_v1"
step qa_unpack 120 "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
    "${QA_PACK:-runs/gpu-data/squad_v1.tar.xz}" "$OUT/data"
# shellcheck disable=SC2086  # QA_ARGS is a list of options
step qa_train $((${QA_MINUTES%.*} * 60 + 240)) "$PY" -m treeqa train qa --config configs/qanet_paper.toml \
    --data.prepared="$QA_DATA" --out "$OUT/qanet" --train.device="$DEVICE" \
    --schedule.budget_minutes="$QA_MINUTES" --schedule.eval_every=1000 --data.dev_subset=2000 $QA_ARGS
# shellcheck disable=SC2086
step qa_train_graphs $((${QA_MINUTES%.*} * 60 + 240)) "$PY" -m treeqa train qa \
    --config configs/qanet_paper.toml --data.prepared="$QA_DATA" --out "$OUT/qanet_graphs" \
    --train.device="$DEVICE" --schedule.budget_minutes="$QA_MINUTES" --schedule.eval_every=1000 \
    --data.dev_subset=2000 --train.compile=reduce-overhead --data.pad_multiple=64 $QA_ARGS
step qa_eval 300 "$PY" -m treeqa evaluate qa --checkpoint "$OUT/qanet" --prepared "$QA_DATA" --split dev --json

# The figures that answer the goals, one line each, last (a short console shows the end).
"$PY" - "$OUT" <<'PY'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])


def last_json(name):  # a .json file, or a log's last line that holds a JSON object
    try:
        text = (out / name).read_text()
        return json.loads(text)
    except OSError:
        return None
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        try:
            return json.loads(line[line.index("{"):])
        except ValueError:
            continue
    return None


for model in ("tree_lstm", "tree_gru"):
    r = last_json(f"tree-{model}.json")
    if r and "epoch_large" in r:
        print(f"{model}: batch {r['epoch_large']['batch']} {r['epoch_large']['sentences_per_s']:,.0f}"
              f" sentences/s; inference ratio {r['inference']['ratio']:.0f}x")
q = last_json("qanet.log")
if q and "results" in q:
    print("qanet batch 32: " + ", ".join(f"{k} {v.get('examples_per_s', 0):,.0f} examples/s"
                                         f" {v.get('peak_mib', 0):,.0f} MiB" for k, v in q["results"].items()))
for name in ("qanet_b128.log", "qanet_compiled.log", "qanet_variants.log"):
    try:
        lines = (out / name).read_text().splitlines()
    except OSError:
        continue
    for line in lines:  # (qanet_variants prints a line for each variant)
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and "examples_per_s" in r:
            print(f"{name[:-4]}: {r['model']} {r['examples_per_s']:,.0f} examples/s"
                  f" {r['peak_mib']:,.0f} MiB")
for run in ("qanet", "qanet_graphs"):
    try:
        rows = [json.loads(x) for x in (out / run / "metrics.jsonl").read_text().splitlines()]
    except (OSError, ValueError):
        continue
    rates = [x["examples_per_s"] for x in rows if "loss" in x and "examples_per_s" in x]
    scores = [x for x in rows if "dev_f1" in x]
    if rates or scores:
        best = max((x["dev_f1"] for x in scores), default=float("nan"))
        print(f"{run}: {rows[-1].get('step', '?')} steps; examples/s per log interval, last 3:"
              f" {[round(r) for r in rates[-3:]]}; best dev F1 (sample) {best:.1f}")
e = last_json("qa_eval.log")
if e and "f1" in e:
    print(f"qa_eval: EM {e['exact_match']:.1f} / F1 {e['f1']:.1f} on {e['total']} questions")
PY

#!/usr/bin/env bash
# The data benchmarks/gpu_checks.sh needs, small enough to travel with the checkout to a GPU
# machine that has neither the data nor spaCy (~35 MB in all):
#   runs/gpu-data/sst/               SST's train/dev/test trees (3 MB)
#   runs/gpu-data/squad_v1.tar.xz    SQuAD v1.1 prepared with GloVe 6B 50-d (~32 MB; the
#                                    prepared directory is ~210 MB unpacked)
#
#   TREEQA_DATA=path/to/data benchmarks/gpu_pack.sh      # then carry runs/gpu-data
#
# Preparing takes ~1.5 minutes and compressing ~3 on 2 cores; an existing pack is kept.
set -eu
cd "$(dirname "$0")/.."
DATA=${TREEQA_DATA:-../shared/data}
OUT=${OUT:-runs/gpu-data}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT/sst"
cp "$DATA"/sst/train.txt "$DATA"/sst/dev.txt "$DATA"/sst/test.txt "$OUT/sst/"
if [ ! -e "$OUT/squad_v1.tar.xz" ]; then
    work="$OUT/prepare"
    rm -rf "$work"
    "$PY" -m treeqa data prepare squad \
        --train "$DATA/squad/train-v1.1.reconstructed.json.gz" \
        --dev "$DATA/squad/dev-v1.1.reconstructed.json.gz" \
        --vectors "$DATA/vectors/glove.6B.50d.sst-squad-subset.txt.gz" \
        --out "$work/squad_v1"
    tar -C "$work" -cf - squad_v1 | xz -6 -T0 >"$OUT/squad_v1.tar.xz.part"
    mv "$OUT/squad_v1.tar.xz.part" "$OUT/squad_v1.tar.xz"
    rm -rf "$work"
fi
du -sh "$OUT"/*

#!/usr/bin/env bash
# Every format-2 benchmark of issues 14 and 15, one after the other, on one machine, with one
# results tag (bench/results/*-TAG.md): the figures a closing note quotes come from one run.
#   bash bench/v2_all.sh TAG            # about 30-40 minutes on 2 cores
set -euo pipefail
TAG=${1:?usage: bench/v2_all.sh TAG}
PY=${PYTHON:-python}
cd "$(dirname "$0")/.."
R=bench/results
$PY -m bench.v2_w1_append --ns 1000 2000 --rounds 3 --tag "$TAG"
$PY -m bench.append_step --n 200000 --steps 20 | tee "$R/append_step-$TAG.txt"
for d in sync async; do
  $PY bench/langgraph_w1.py --n 1000 --durability $d --out "$R/langgraph_w1-$TAG-$d.md"
done
$PY -m bench.v2_w2 --mib 256 --rounds 3
cp "$R/v2_w2.md" "$R/v2_w2-$TAG.md"
$PY -m bench.v2_s3 --rounds 3 --tag "$TAG"

#!/usr/bin/env bash
# The Gemma layer sweep at N = 1024: all 18 layers of gemma_probe, one stored entry per layer, and
# the time per layer, on a GPU machine (goal: at most 30 s per layer on an H200).
#
#   OUT=/some/dir tools/gpu_gemma_sweep.sh                 # all 18 layers, 17 down to 0
#   OUT=/some/dir tools/gpu_gemma_sweep.sh --layers 16     # extra arguments go to tools/gemma_sweep.py
#
# Run it from the repository root of a clean checkout (paper-scale entries are computed only from
# committed code). It needs: JAX with the GPU backend; the float32 Gemma weights in the model cache
# ($NTKBOOK_MODEL_CACHE or ~/.cache/ntkbook/gemma3-270m/f32-v1, see ntkbook.gemma.weights); the
# paper-scale data set gemma_pos_windows in results/ (committed). It writes the sweep's entries to
# $OUT/results (copy them into results/ to keep them) and the time per layer to
# $OUT/gemma_sweep_times.json; a stopped run resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gemma_sweep}
PYTHON=${PYTHON:-python}
mkdir -p "$OUT/results"
export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}"
"$PYTHON" -c "import jax; print('devices:', jax.devices())"
"$PYTHON" tools/gemma_sweep.py --n-per-class 128 --results "$OUT/results" \
    --times "$OUT/gemma_sweep_times.json" "$@" 2>&1 | tee "$OUT/gemma_sweep.log"

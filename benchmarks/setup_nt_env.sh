#!/usr/bin/env bash
# Create the pinned neural-tangents environment used by bench_neural_tangents.py.
#   bash benchmarks/setup_nt_env.sh [ENV_DIR] [PYTHON]
# ENV_DIR defaults to /tmp/nt-env (the driver's default --nt-python is ENV_DIR/bin/python);
# PYTHON is a Python 3.12 interpreter (default: pyenv's 3.12.1 if present, else python3.12).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
env_dir="${1:-/tmp/nt-env}"
py="${2:-}"
if [ -z "$py" ]; then
  if [ -x /root/.pyenv/versions/3.12.1/bin/python3.12 ]; then
    py=/root/.pyenv/versions/3.12.1/bin/python3.12
  else
    py="$(command -v python3.12)"
  fi
fi
"$py" -m venv "$env_dir"
"$env_dir/bin/pip" install --quiet -r "$here/nt-env-requirements.txt"
"$env_dir/bin/python" - <<'PY'
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import jax, neural_tangents as nt
print(f"neural-tangents {nt.__version__} on jax {jax.__version__}: ok")
PY

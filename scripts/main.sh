#!/usr/bin/env bash
# The project's main job on its embedded default (a tiny model, built-in synthetic data, CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 scripts/demo.py "$@"

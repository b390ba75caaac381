#!/usr/bin/env bash
# The main job on its embedded default: train a tiny memory agent on built-in synthetic data (CPU),
# evaluate it, write the checkpoint with its model card and accuracy plot (outputs/tiny-memagent).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 scripts/train_tiny.py "$@"

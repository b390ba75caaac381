#!/usr/bin/env bash
# The project's test command: set up, lint, run the whole suite offline on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m pytest tests -q "$@"

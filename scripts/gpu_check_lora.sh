#!/usr/bin/env bash
# Check the single-node LoRA recipe (recipes/lora-qwen2.5-7b-instruct-1node.yaml) for real on a GPU machine:
# the same recipe through `trl-memagent train` (vLLM server mode, LoRA, accelerate launch when there are GPUs
# to spare), shortened by command-line overrides: a small model, synthetic RULER documents built offline with
# its tokenizer, 4 optimizer steps, a 1K-token chunk. The adapter is then merged (push_merged; nothing is
# pushed), the checkpoint evaluated and its card written. Needs a CUDA GPU, vLLM (0.22-0.31) and the model
# (downloaded from the Hub on first use). A few minutes on one GPU.
#
#   bash scripts/gpu_check_lora.sh
#   MODEL=/path/to/small-instruct-model bash scripts/gpu_check_lora.sh
#
# With one GPU the vLLM server and the training share it; with more, the server takes the last GPU and the
# training runs on the others (DDP). Prints PASS when: the run exits 0, every rollout had several
# conversations, the importance-sampling ratio stays near 1 (vLLM samples from the adapter being trained,
# merged in at each weight sync), the weights moved when rewards differed within a group, and the output
# folder holds merged full weights (no adapter files), a card saying so and an evaluation of 8 samples.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
PORT=${PORT:-8000}
OUT=${OUT:-$(mktemp -d)}
GPUS=$(python -c "import torch; print(torch.cuda.device_count())")
[ "$GPUS" -ge 1 ] || { echo "gpu_check_lora: no CUDA GPU visible" >&2; exit 1; }
python -c "import vllm" || { echo "gpu_check_lora: vLLM is not installed (pip install 'trl[vllm]')" >&2; exit 1; }

if [ "$GPUS" -eq 1 ]; then
  SERVER_GPU=0; TRAIN_GPUS=0; PROCESSES=1; UTILIZATION=0.3
else
  SERVER_GPU=$((GPUS - 1)); TRAIN_GPUS=$(seq -s, 0 $((GPUS - 2))); PROCESSES=$((GPUS - 1)); UTILIZATION=0.8
fi

echo "=== vLLM server on GPU $SERVER_GPU ($MODEL), logs in $OUT/vllm-server.log ==="
CUDA_VISIBLE_DEVICES=$SERVER_GPU trl vllm-serve --model "$MODEL" --port "$PORT" \
  --gpu_memory_utilization "$UTILIZATION" --max_model_len 4096 > "$OUT/vllm-server.log" 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://localhost:$PORT/health" > /dev/null && break
  kill -0 $SERVER_PID 2>/dev/null || { echo "vLLM server died, see $OUT/vllm-server.log" >&2; exit 1; }
  sleep 5
done

OVERRIDES=(
  --model_name_or_path "$MODEL" --attn_implementation sdpa --output_dir "$OUT/lora"
  --dataset_name synthetic --synthetic_tasks niah_single_1 niah_multikey_1 --synthetic_lengths 2048 3072
  --synthetic_samples 4 --chunk_tokens 1024 --memory_tokens 256 --max_completion_length 128 --max_chunks 4
  --num_generations 4 --per_device_train_batch_size 4 --gradient_accumulation_steps 2 --steps_per_generation 4
  --max_steps 4 --warmup_steps 0 --learning_rate 1e-4 --lora_r 16 --lora_alpha 32
  --vllm_server_host 127.0.0.1 --vllm_server_port "$PORT" --save_strategy "no" --report_to none
  --push_merged true --final_eval true --final_eval_tasks niah_single_1 --final_eval_lengths 2048 3072
  --final_eval_samples 4
)
echo "=== training on GPU(s) $TRAIN_GPUS ($PROCESSES process(es)), logs in $OUT/train.log ==="
status=0
if [ "$PROCESSES" -gt 1 ]; then
  CUDA_VISIBLE_DEVICES=$TRAIN_GPUS accelerate launch --config_file recipes/accelerate/multi-gpu-7.yaml \
    --num_processes "$PROCESSES" --gpu_ids all -m trl_memagent.train_cli \
    --config recipes/lora-qwen2.5-7b-instruct-1node.yaml "${OVERRIDES[@]}" 2>&1 | tee "$OUT/train.log" || status=1
else
  CUDA_VISIBLE_DEVICES=$TRAIN_GPUS python -m trl_memagent.train_cli \
    --config recipes/lora-qwen2.5-7b-instruct-1node.yaml "${OVERRIDES[@]}" 2>&1 | tee "$OUT/train.log" || status=1
fi
kill $SERVER_PID; wait $SERVER_PID 2>/dev/null || true
trap - EXIT
[ "$status" -eq 0 ] || { echo "lora: FAIL (training exited with an error, see $OUT/train.log)"; exit 1; }

python - "$OUT" "$MODEL" <<'PY'
import ast
import json
import os
import re
import sys

import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM

out, base = sys.argv[1], sys.argv[2]
folder = os.path.join(out, "lora")
logs = []
for line in open(os.path.join(out, "train.log"), encoding="utf-8", errors="replace"):
    for match in re.findall(r"\{'loss'.*?\}", line):
        entry = ast.literal_eval(match)
        if "reward" in entry:
            logs.append({k: float(v) for k, v in entry.items()})
merged = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
reference = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
moved = max((p - reference.state_dict()[n]).abs().max().item() for n, p in merged.state_dict().items())
rewards_differed = any(h["frac_reward_zero_std"] < 1 for h in logs)
summary = json.load(open(os.path.join(folder, "eval", "summary.json")))
checks = {
    "generation steps logged": len(logs) >= 2,
    "several conversations per rollout": all(h["conversations/mean"] > 2 for h in logs),
    "IS ratio near 1 at every step": all(0.8 < h["sampling/importance_sampling_ratio/mean"] < 1.25 for h in logs),
    "weights moved (when rewards differed within a group)": moved > 0 or not rewards_differed,
    "merged full weights, no adapter files": os.path.isfile(os.path.join(folder, "model.safetensors"))
    and not os.path.exists(os.path.join(folder, "adapter_config.json")),
    "card says merged": "was merged into the base model" in ModelCard.load(os.path.join(folder, "README.md")).text,
    "evaluation of 8 samples, none failed": summary["overall"]["n"] == 8 and summary["overall"]["failed"] == 0,
}
for h in logs:
    print({k: h.get(k) for k in ("loss", "reward", "frac_reward_zero_std", "conversations/mean",
                                 "sampling/importance_sampling_ratio/mean")})
print(f"  max weight change vs the base: {moved:.3g}; eval accuracy {summary['overall']['accuracy']}%")
for name, ok in checks.items():
    print(f"  [lora] {name}: {'ok' if ok else 'FAILED'}")
print(f"lora: {'PASS' if all(checks.values()) else 'FAIL'}")
sys.exit(0 if all(checks.values()) else 1)
PY

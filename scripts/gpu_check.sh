#!/usr/bin/env bash
# Check MultiConvGRPOTrainer's GPU-only paths for real: vLLM server mode (TRL's VLLMClient, weight sync over
# NCCL), vLLM colocate mode (with sleep mode) and QLoRA (4-bit base + LoRA, transformers generation). Needs a
# CUDA GPU, vLLM (a version TRL supports: 0.22-0.31), bitsandbytes for qlora, and a small Qwen2.5 model.
# Takes a few minutes on one GPU.
#
#   bash scripts/gpu_check.sh                       # both modes, Qwen/Qwen2.5-0.5B-Instruct
#   MODEL=/path/to/model MODES=colocate bash scripts/gpu_check.sh
#
# Each mode trains 3 steps on synthetic long documents and prints PASS when: the loss is finite, every rollout
# had several conversations, the weights moved and, with vLLM, the importance-sampling ratio stays near 1
# (vLLM samples from the weights being trained, so the weight sync works).
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
MODES=${MODES:-"server colocate qlora"}
PORT=${PORT:-8000}
OUT=${OUT:-$(mktemp -d)}
GPUS=$(python -c "import torch; print(torch.cuda.device_count())")
[ "$GPUS" -ge 1 ] || { echo "gpu_check: no CUDA GPU visible" >&2; exit 1; }
if [[ "$MODES" == *server* || "$MODES" == *colocate* ]]; then
  python -c "import vllm" || { echo "gpu_check: vLLM is not installed (pip install 'trl[vllm]')" >&2; exit 1; }
fi

run_training() {  # $1 = server|colocate|qlora
  python - "$1" "$MODEL" "$OUT/$1" "$PORT" <<'PY'
import math
import sys

from datasets import Dataset

from trl_memagent.config import MultiConvGRPOConfig
from trl_memagent.tiny import filler_text
from trl_memagent.trainer import MultiConvGRPOTrainer

mode, model, out, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
needle = "The secret city is Valparaiso."
docs = [filler_text(1500, s)[:4000] + " " + needle + " " + filler_text(800, s + 9) for s in range(4)]
dataset = Dataset.from_dict(
    {"prompt": ["What is the secret city?"] * 4, "context": docs, "answers": [["Valparaiso"]] * 4}
)
vllm = mode in ("server", "colocate")
args = MultiConvGRPOConfig(
    output_dir=out,
    use_vllm=vllm,
    vllm_mode=mode if vllm else "server",
    vllm_server_port=port,
    vllm_gpu_memory_utilization=0.3,
    vllm_enable_sleep_mode=mode == "colocate",
    vllm_max_model_length=4096,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=1,
    num_generations=4,
    max_steps=3,
    learning_rate=1e-5,
    logging_steps=1,
    chunk_tokens=512,
    memory_tokens=128,
    max_completion_length=64,
    report_to=[],
    save_strategy="no",
)
extra = {}
if mode == "qlora":
    import torch
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    extra["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    extra["peft_config"] = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
trainer = MultiConvGRPOTrainer(model, args=args, train_dataset=dataset, **extra)
trainable = lambda: {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}  # noqa: E731
before = {n: p.detach().float().clone() for n, p in trainable().items()}
trainer.train()
logs = [h for h in trainer.state.log_history if "loss" in h and "reward" in h]
moved = max((p.detach().float() - before[n]).abs().max().item() for n, p in trainable().items())
checks = {
    "loss finite": all(math.isfinite(h["loss"]) for h in logs),
    "several conversations per rollout": all(h["conversations/mean"] > 2 for h in logs),
    "weights moved": moved > 0,
}
if vllm:
    checks["IS ratio near 1 at every step"] = all(
        0.8 < h["sampling/importance_sampling_ratio/mean"] < 1.25 for h in logs
    )
for h in logs:
    print({k: h.get(k) for k in ("loss", "reward", "conversations/mean", "memory/mean_length",
                                 "sampling/importance_sampling_ratio/mean", "sampling/sampling_logp_difference/mean")})
for name, ok in checks.items():
    print(f"  [{mode}] {name}: {'ok' if ok else 'FAILED'}")
print(f"{mode}: {'PASS' if all(checks.values()) else 'FAIL'}")
sys.exit(0 if all(checks.values()) else 1)
PY
}

status=0
for mode in $MODES; do
  echo "=== $mode mode ($MODEL) ==="
  if [ "$mode" = server ]; then
    # One GPU: the server and the trainer share it; two or more: the server gets the last one.
    SERVER_GPU=$((GPUS - 1)); TRAIN_GPU=0
    CUDA_VISIBLE_DEVICES=$SERVER_GPU trl vllm-serve --model "$MODEL" --port "$PORT" \
      --gpu_memory_utilization 0.3 --max_model_len 4096 > "$OUT/vllm-server.log" 2>&1 &
    SERVER_PID=$!
    trap 'kill $SERVER_PID 2>/dev/null || true' EXIT
    for _ in $(seq 1 120); do
      curl -sf "http://localhost:$PORT/health" > /dev/null && break
      kill -0 $SERVER_PID 2>/dev/null || { echo "vLLM server died, see $OUT/vllm-server.log"; exit 1; }
      sleep 5
    done
    CUDA_VISIBLE_DEVICES=$TRAIN_GPU run_training server || status=1
    kill $SERVER_PID; wait $SERVER_PID 2>/dev/null || true
    trap - EXIT
  else
    CUDA_VISIBLE_DEVICES=0 run_training "$mode" || status=1
  fi
done
exit $status

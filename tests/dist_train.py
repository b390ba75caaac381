"""One MultiConvGRPOTrainer step on 2 CPU processes (gloo), with a different number of conversations per process.

Run by tests/test_trainer_dist.py as `torchrun --standalone --nproc_per_node 2 tests/dist_train.py MODEL_DIR OUT_DIR`.
Rank 0 writes the rollouts of both processes (in generation-batch order), the row counts per process and the
parameter update, so the test can replay the same rollouts in a single process and compare the updates.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from accelerate.utils import gather_object  # noqa: E402
from configs import SGD_STEP, cpu_config  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from trl_memagent.tiny import filler_text  # noqa: E402
from trl_memagent.trainer import MultiConvGRPOTrainer  # noqa: E402


def known_reward(completions, completion_ids, **kwargs):
    return [(sum(ids) % 5) / 4 for ids in completion_ids]


def dataset() -> Dataset:
    # One question with a 1-chunk document, one with a 3-chunk document: each process gets the two
    # rollouts of one question, so one process has 4 rows and the other 8.
    return Dataset.from_dict(
        {
            "prompt": ["Who founded the city?", "Which river is the longest?"],
            "context": [filler_text(12, 1), filler_text(60, 2)],
            "answers": [["king"], ["river"]],
        }
    )


def config(output_dir: str, per_device: int):
    return cpu_config(output_dir, per_device_train_batch_size=per_device, gradient_accumulation_steps=1, **SGD_STEP)


class RecordingTrainer(MultiConvGRPOTrainer):
    def _rollout(self, inputs, mode):
        self.trajectories = super()._rollout(inputs, mode)
        return self.trajectories


def main(model_dir: str, out_dir: str) -> None:
    trainer = RecordingTrainer(
        AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=known_reward,
        args=config(os.path.join(out_dir, "run"), per_device=2),
        train_dataset=dataset(),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    model = trainer.accelerator.unwrap_model(trainer.model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    rollouts = [
        {
            "question": t.question,
            "answer": t.answer,
            "memories": t.memories,
            "conversations": [c.__dict__ for c in t.conversations],
        }
        for t in trainer.trajectories
    ]
    rollouts = gather_object(rollouts)
    rows = gather_object([sum(len(t.conversations) for t in trainer.trajectories)])
    if trainer.accelerator.is_main_process:
        update = {n: p.detach() - before[n] for n, p in model.named_parameters()}
        torch.save(update, os.path.join(out_dir, "update.pt"))
        with open(os.path.join(out_dir, "rollouts.json"), "w") as f:
            json.dump(
                {"rollouts": rollouts, "rows_per_process": rows, "world_size": trainer.accelerator.num_processes}, f
            )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""The RL conditions of the ablation, run with the project's `MultiConvGRPOTrainer`.

- `none`: the warm-start itself (no RL).
- `multi_conv`: MemAgent's multi-conversation GRPO; the rollout's advantage on every conversation.
- `final_only`: the same trainer, budget and seeds, but only the final-answer conversation of each rollout is
  a training row, so the memory updates never receive a gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from datasets import Dataset

from ..config import MultiConvGRPOConfig
from ..rewards import memagent_reward
from ..rollout import MemoryAgentConfig
from ..trainer import MultiConvGRPOTrainer

Condition = Literal["none", "multi_conv", "final_only"]
CONDITIONS: tuple[Condition, ...] = ("none", "multi_conv", "final_only")
RL_CONDITIONS: tuple[Condition, ...] = ("multi_conv", "final_only")


class FinalOnlyGRPOTrainer(MultiConvGRPOTrainer):
    """`MultiConvGRPOTrainer` that trains only the final-answer conversation of each rollout (condition c).

    Rollouts, rewards and group advantages are those of the parent; the memory-update rows are dropped before
    the micro-batches are built (the trainer's `_micro_batches(rows, row_advantages, mode)` seam), so they carry
    neither policy-gradient nor KL loss nor normalizer weight. Each optimizer step is then a token mean over the
    final answers alone. `tests/test_micro_repro.py` checks that exactly the final answers are trained.
    """

    def _micro_batches(self, rows, row_advantages, mode):
        last_turn: dict[int, int] = {}
        for row in rows:
            last_turn[row.sample] = max(last_turn.get(row.sample, -1), row.turn)
        keep = [i for i, row in enumerate(rows) if row.turn == last_turn[row.sample]]
        return super()._micro_batches([rows[i] for i in keep], row_advantages[keep], mode)


@dataclass
class RLConfig:
    """The RL budget shared by both RL conditions (same steps, batch, rollouts and seeds)."""

    max_steps: int = field(default=40, metadata={"help": "Optimizer steps (one generation batch each)."})
    questions_per_step: int = field(default=8, metadata={"help": "Distinct questions per generation batch."})
    num_generations: int = field(default=8, metadata={"help": "Rollouts per question (the GRPO group size G)."})
    micro_batches: int = field(default=4, metadata={"help": "Gradient-accumulation micro-batches per step."})
    learning_rate: float = field(
        default=2e-4,
        metadata={"help": "Constant AdamW learning rate (at 5e-4 the final-only condition collapsed to 0 reward)."},
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient against the warm-start (paper: 1e-3)."})
    temperature: float = field(default=1.0, metadata={"help": "Rollout sampling temperature (paper: 1.0)."})
    num_questions: int = field(default=2048, metadata={"help": "Size of the RL question pool."})

    def __post_init__(self):
        if (self.questions_per_step * self.num_generations) % self.micro_batches:
            raise ValueError(
                f"questions_per_step * num_generations ({self.questions_per_step * self.num_generations}) must be a "
                f"multiple of micro_batches ({self.micro_batches})"
            )


def grpo_config(config: RLConfig, output_dir: str, seed: int, agent: MemoryAgentConfig) -> MultiConvGRPOConfig:
    """The `MultiConvGRPOConfig` of one RL run: paper defaults (DAPO token mean, r - mean, clip 0.2) on CPU."""
    rollouts = config.questions_per_step * config.num_generations
    return MultiConvGRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        chunk_tokens=agent.chunk_tokens,
        memory_tokens=agent.memory_tokens,
        max_completion_length=agent.answer_tokens,
        num_generations=config.num_generations,
        per_device_train_batch_size=rollouts // config.micro_batches,
        gradient_accumulation_steps=config.micro_batches,
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.01,
        max_grad_norm=1.0,
        beta=config.beta,
        temperature=config.temperature,
        top_p=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        disable_tqdm=True,
    )


def train_rl(
    condition: Condition,
    model,
    tokenizer,
    train_rows: list[dict],
    config: RLConfig,
    output_dir: str,
    seed: int,
    agent: MemoryAgentConfig,
):
    """Train `model` in place under `condition` ('multi_conv' or 'final_only'); returns the log history."""
    if condition not in RL_CONDITIONS:
        raise ValueError(f"condition must be one of {RL_CONDITIONS}, got {condition!r}")
    cls = MultiConvGRPOTrainer if condition == "multi_conv" else FinalOnlyGRPOTrainer
    args = grpo_config(config, output_dir, seed, agent)
    columns = ("prompt", "context", "answers")
    dataset = Dataset.from_list([{c: row[c] for c in columns} for row in train_rows])
    trainer = cls(model, reward_funcs=memagent_reward, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    return trainer.state.log_history

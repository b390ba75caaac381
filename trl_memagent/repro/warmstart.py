"""The supervised warm-start: a tiny Qwen2 trained from scratch on teacher trajectories with TRL's `SFTTrainer`."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from datasets import Dataset
from transformers import Qwen2ForCausalLM

from ..templates import PromptBuilder
from ..tiny import build_tiny_model
from .task import TaskGenerator
from .teacher import TeacherConfig, teacher_examples


@dataclass
class WarmStartConfig:
    """Model size and the SFT budget (kept short on purpose: the warm-start should be imperfect)."""

    hidden_size: int = field(default=128, metadata={"help": "Hidden size of the tiny Qwen2."})
    num_layers: int = field(default=2, metadata={"help": "Decoder layers of the tiny Qwen2."})
    initializer_range: float = field(
        default=0.06,
        metadata={
            "help": "Std of the initial weights. Qwen2's 0.02 leaves a model this small on a plateau for hundreds "
            "of steps before it learns to copy; 0.06 learns the task in ~120 steps."
        },
    )
    num_samples: int = field(default=2000, metadata={"help": "Teacher trajectories (each gives chunks + 1 examples)."})
    max_steps: int = field(default=300, metadata={"help": "SFT optimizer steps."})
    batch_size: int = field(default=32, metadata={"help": "SFT examples per step."})
    learning_rate: float = field(
        default=2e-3, metadata={"help": "Peak SFT learning rate (30 warm-up steps, then cosine decay to 0)."}
    )
    teacher: TeacherConfig = field(default_factory=TeacherConfig, metadata={"help": "The teacher's noise."})


def tiny_qwen2(tokenizer, config: WarmStartConfig, seed: int) -> Qwen2ForCausalLM:
    """The project's tiny Qwen2 (`build_tiny_model`) at this size, initialized with `initializer_range`."""
    model_config = build_tiny_model(tokenizer, hidden_size=config.hidden_size, num_layers=config.num_layers).config
    model_config.initializer_range = config.initializer_range
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(model_config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def sft_dataset(
    generator: TaskGenerator, prompts: PromptBuilder, config: WarmStartConfig, num_chunks: int, seed: int
) -> Dataset:
    """Pre-tokenized SFT rows (`input_ids`, `completion_mask`) from `num_samples` teacher trajectories."""
    rng = random.Random(seed)
    rows = []
    for _ in range(config.num_samples):
        sample = generator.sample(rng, num_chunks)
        rows += [e.sft_row() for e in teacher_examples(sample, prompts, rng, config.teacher)]
    return Dataset.from_list(rows)


def warm_start(
    tokenizer, generator: TaskGenerator, config: WarmStartConfig, num_chunks: int, output_dir: str, seed: int = 0
):
    """Train the tiny model from scratch on `num_chunks`-chunk teacher trajectories; saved to `output_dir`.

    Returns the trained model and the trainer's log history.
    """
    from trl import SFTConfig, SFTTrainer

    prompts = PromptBuilder(tokenizer)
    dataset = sft_dataset(generator, prompts, config, num_chunks, seed)
    model = tiny_qwen2(tokenizer, config, seed)
    args = SFTConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=min(30, config.max_steps),
        weight_decay=0.01,
        completion_only_loss=True,
        max_length=None,
        logging_steps=max(1, config.max_steps // 15),
        save_strategy="no",
        report_to=[],
        seed=seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    trainer.save_model(output_dir)
    tokenizer.save_pretrained(output_dir)
    return trainer.model, trainer.state.log_history

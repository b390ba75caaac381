"""Teacher trajectories of the synthetic task, as token-space SFT examples, with deliberate noise.

The teacher runs the MemAgent workflow on a sample: on the target chunk it writes the fact into the memory,
on every other chunk it keeps the previous memory, and the final conversation answers `\\boxed{code}`. The
noise: on every other chunk the teacher drops the memory (writes `No previous memory` again) with
probability `forget_rate`, and on a chunk holding a distractor (color) fact it overwrites the memory with
that fact with probability `overwrite_rate`. A model fitted to these trajectories inherits those habits, so
its memory survives each chunk read after the target only with probability about 1 - forget_rate: it
degrades with document length, which is the failure RL is expected to remove.

Prompts are assembled with the project's `PromptBuilder` exactly as the rollout assembles them, so the
warm-start is trained on the very token sequences it will see under `MemoryAgent`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..templates import PromptBuilder
from .task import DISTRACTOR_ATTRIBUTE, Sample, boxed, fact_text


@dataclass
class TeacherConfig:
    """How the teacher writes memories."""

    forget_rate: float = field(
        default=0.3,
        metadata={"help": "Probability that the teacher drops the memory on a chunk without the target fact."},
    )
    overwrite_rate: float = field(
        default=0.0,
        metadata={"help": "Probability that the teacher overwrites the memory with a distractor's fact."},
    )

    def __post_init__(self):
        for name in ("forget_rate", "overwrite_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")


@dataclass
class Example:
    """One conversation of a teacher trajectory: prompt ids and the completion the teacher wrote (with EOS)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    kind: str  # "memory" or "final"

    def sft_row(self) -> dict:
        """A pre-tokenized row for TRL's `SFTTrainer` (loss on the completion only)."""
        ids = self.prompt_ids + self.completion_ids
        return {"input_ids": ids, "completion_mask": [0] * len(self.prompt_ids) + [1] * len(self.completion_ids)}


def teacher_examples(
    sample: Sample, prompts: PromptBuilder, rng: random.Random, config: TeacherConfig
) -> list[Example]:
    """The teacher's conversations on one sample: one memory update per chunk, then the final answer.

    The final answer is kept only when the memory still holds the target fact: the teacher never shows an
    answer that the memory does not support.
    """
    tokenizer = prompts.tokenizer
    eos = [tokenizer.eos_token_id]

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    question_ids = encode(sample.question)
    target_memory = encode(fact_text(sample.key, sample.value))
    memory = list(prompts.initial_memory_ids)
    examples = []
    for index, chunk in enumerate(sample.chunks):
        prompt = prompts.memory_prompt(question_ids, memory, encode(chunk))
        if index == sample.target_chunk:
            memory = target_memory
        elif index in sample.distractors and rng.random() < config.overwrite_rate:
            memory = encode(fact_text(*sample.distractors[index], DISTRACTOR_ATTRIBUTE))
        elif rng.random() < config.forget_rate:
            memory = list(prompts.initial_memory_ids)
        examples.append(Example(prompt, memory + eos, "memory"))
    if memory == target_memory:
        examples.append(
            Example(prompts.final_prompt_ids(question_ids, memory), encode(boxed(sample.value)) + eos, "final")
        )
    return examples

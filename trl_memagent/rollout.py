"""The recurrent memory rollout: (question, long document) -> independent conversations.

Each chunk is read in a fresh conversation that rewrites the memory; a last conversation answers from
the question and the final memory alone. All conversations active at a turn go to the backend in one
call, so a batch whose longest document has K chunks costs exactly K + 1 backend calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from tqdm.auto import tqdm

from .backends import FinishReason, GenerationBackend
from .chunking import Truncation, chunk_document, tokenize_documents
from .templates import FinalPrompt, PromptBuilder


@dataclass
class MemoryAgentConfig:
    """Sizes of the fixed context window and how documents are cut (paper: 5000 / 1024 / 1024)."""

    chunk_tokens: int = field(default=5000, metadata={"help": "Document tokens read per memory-update turn."})
    memory_tokens: int = field(
        default=1024, metadata={"help": "Maximum new tokens of a memory update; bounds the memory by construction."}
    )
    answer_tokens: int = field(default=1024, metadata={"help": "Maximum new tokens of the final answer."})
    question_max_tokens: int = field(
        default=1024, metadata={"help": "Longest question accepted, in tokens; longer ones raise a ValueError."}
    )
    max_chunks: int | None = field(
        default=None, metadata={"help": "Most chunks read per document (None: no limit, the paper's evaluation)."}
    )
    truncation: Truncation = field(
        default="center",
        metadata={
            "help": "What to do with documents longer than max_chunks * chunk_tokens: 'center' keeps the head and "
            "tail (the reference training), 'error' raises.",
            "choices": ["center", "error"],
        },
    )
    final_prompt: FinalPrompt = field(
        default="boxed",
        metadata={
            "help": "Final-answer template: 'boxed' (training, quickstart) or 'plain' ('Therefore, the answer is').",
            "choices": ["boxed", "plain"],
        },
    )

    def __post_init__(self):
        for name in ("chunk_tokens", "memory_tokens", "answer_tokens", "question_max_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_chunks is not None and self.max_chunks <= 0:
            raise ValueError(f"max_chunks must be positive or None, got {self.max_chunks}")
        if self.truncation not in ("center", "error"):
            raise ValueError(f"truncation must be 'center' or 'error', got {self.truncation!r}")
        if self.final_prompt not in ("boxed", "plain"):
            raise ValueError(f"final_prompt must be 'boxed' or 'plain', got {self.final_prompt!r}")


@dataclass
class Conversation:
    """One independent model call: a memory update (`chunk_index` = k) or the final answer."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None
    kind: Literal["memory", "final"]
    chunk_index: int | None
    finish_reason: FinishReason


@dataclass
class Trajectory:
    """Everything one (question, document) rollout produced, in order; the memory trace is readable."""

    question: str
    conversations: list[Conversation]
    memories: list[str]
    answer: str
    document_tokens: int = 0  # tokens of the document, before any truncation

    @property
    def num_chunks(self) -> int:
        return len(self.conversations) - 1

    @property
    def num_prompt_tokens(self) -> int:
        return sum(len(c.prompt_ids) for c in self.conversations)

    @property
    def num_completion_tokens(self) -> int:
        return sum(len(c.completion_ids) for c in self.conversations)


class MemoryAgent:
    """Reads documents of any length chunk by chunk with a fixed-size memory, through any backend."""

    def __init__(self, backend: GenerationBackend, tokenizer, config: MemoryAgentConfig | None = None):
        self.backend = backend
        self.tokenizer = tokenizer
        self.config = config or MemoryAgentConfig()
        self.prompts = PromptBuilder(tokenizer, self.config.final_prompt)

    def run(
        self,
        questions: Sequence[str],
        documents: Sequence[str | Iterable[str]],
        progress: bool = False,
    ) -> list[Trajectory]:
        """One trajectory per (question, document), in input order.

        A document may be a string or an iterable of text blocks (e.g. `chunking.stream_text_file`).
        """
        return self.run_prepared(prepare_inputs(self.tokenizer, self.config, questions, documents), progress)

    def run_prepared(self, inputs: PreparedInputs, progress: bool = False) -> list[Trajectory]:
        """The rollout proper, on tokenized questions and chunked documents."""
        decode = self.tokenizer.decode
        question_ids, chunks, num_turns = inputs.question_ids, inputs.chunks, inputs.num_turns
        memories = [list(self.prompts.initial_memory_ids) for _ in question_ids]
        trajectories = [
            Trajectory(question=q, conversations=[], memories=[], answer="", document_tokens=n)
            for q, n in zip(inputs.questions, inputs.document_tokens, strict=True)
        ]
        bar = tqdm(total=num_turns + 1, desc="memory agent", unit="turn", disable=not progress)
        for k in range(num_turns):
            active = [i for i, doc_chunks in enumerate(chunks) if k < len(doc_chunks)]
            prompt_ids = [
                self.prompts.memory_prompt(question_ids[i], memories[i], chunks[i][k].tolist()) for i in active
            ]
            generations = self.backend.generate(prompt_ids, self.config.memory_tokens)
            for i, prompt, generation in zip(active, prompt_ids, generations, strict=True):
                trajectories[i].conversations.append(
                    Conversation(
                        prompt, generation.completion_ids, generation.logprobs, "memory", k, generation.finish_reason
                    )
                )
                memories[i] = self.prompts.memory_from_completion(generation.completion_ids)
                trajectories[i].memories.append(decode(memories[i], skip_special_tokens=True))
            bar.update(1)
        prompt_ids = [self.prompts.final_prompt_ids(q, m) for q, m in zip(question_ids, memories)]
        generations = self.backend.generate(prompt_ids, self.config.answer_tokens) if prompt_ids else []
        for trajectory, prompt, generation in zip(trajectories, prompt_ids, generations, strict=True):
            trajectory.conversations.append(
                Conversation(
                    prompt, generation.completion_ids, generation.logprobs, "final", None, generation.finish_reason
                )
            )
            trajectory.answer = decode(generation.completion_ids, skip_special_tokens=True)
        bar.update(1)
        bar.close()
        return trajectories


@dataclass
class PreparedInputs:
    """Questions and documents as the rollout consumes them: token ids and per-document chunk lists."""

    questions: list[str]
    question_ids: list[list[int]]
    chunks: list[list[np.ndarray]]
    document_tokens: list[int]

    @property
    def num_turns(self) -> int:
        """Memory turns of the rollout: the most chunks of any document (0 when all are empty)."""
        return max((len(c) for c in self.chunks), default=0)


def prepare_inputs(
    tokenizer, config: MemoryAgentConfig, questions: Sequence[str], documents: Sequence[str | Iterable[str]]
) -> PreparedInputs:
    """Tokenize questions and documents once and cut the documents into chunks.

    Equal document strings (the G rollouts of one question) are tokenized once. Errors name the input.
    """
    if len(questions) != len(documents):
        raise ValueError(f"got {len(questions)} questions but {len(documents)} documents")
    for index, question in enumerate(questions):
        if not isinstance(question, str):
            raise TypeError(f"questions[{index}] must be a string, got {type(question).__name__}")
    for index, document in enumerate(documents):
        if isinstance(document, bytes | bytearray) or not isinstance(document, str | Iterable):
            raise TypeError(
                f"documents[{index}] must be a string or an iterable of strings, got {type(document).__name__}"
            )
    question_ids = tokenizer(list(questions), add_special_tokens=False)["input_ids"] if questions else []
    for index, ids in enumerate(question_ids):
        if len(ids) > config.question_max_tokens:
            raise ValueError(
                f"questions[{index}] has {len(ids)} tokens, more than question_max_tokens={config.question_max_tokens}"
            )
    # Equal strings share one tokenization; a streamed document (an iterable) is its own.
    keys = [document if isinstance(document, str) else id(document) for document in documents]
    unique = dict(zip(keys, documents))
    tokenized = dict(zip(unique, tokenize_documents(tokenizer, list(unique.values()))))
    chunked = {
        key: chunk_document(ids, config.chunk_tokens, config.max_chunks, config.truncation)
        for key, ids in tokenized.items()
    }
    return PreparedInputs(list(questions), question_ids, [chunked[k] for k in keys], [len(tokenized[k]) for k in keys])

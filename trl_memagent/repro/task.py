"""The synthetic memory task of the micro reproduction: find one key's code among distractors in filler text.

A document is `num_chunks` chunks of exactly `chunk_tokens` tokens of filler words. One chunk holds the
target fact `The code of <key> is <value>.`; other chunks hold, each with probability `distractor_rate`, a
distractor fact of the same shape about another attribute, `The color of <key> is <value>.` (any key, the
target's included). The question is `What is the code of <key>?` and the gold answer the value. The final
conversation sees only the question and the memory, so the answer can only come from what the memory
carried: a memory that is dropped or overwritten after the target chunk loses the answer, and longer
documents hold more chunks after it.

Distractors differ from the target by their attribute rather than by their key on purpose: telling two keys
apart needs a token-comparison circuit that a 2-layer model trained for a few minutes on CPU does not learn
(measured: the decision stays at chance after 650 SFT steps), while `code` vs `color` is learned with the
rest of the task.

Chunks are built at the pre-token level (a byte-level BPE never merges across pre-tokens), so the document
tokenizes to exactly `num_chunks * chunk_tokens` ids and no fact straddles a chunk boundary: every chunk the
agent reads is a chunk the generator laid out, which the teacher trajectories rely on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cached_property

from tokenizers import AddedToken

from ..chunking import chunk_document, tokenize_document
from ..templates import FINAL_TEMPLATE_BOXED, INITIAL_MEMORY, MEMORY_TEMPLATE
from ..tiny import build_tiny_tokenizer

KEYS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike oscar papa romeo").split()
FILLER_WORDS = (
    "a the of and to in on at by with from over under near after before while river hill stone field road "
    "house tree cloud rain wind snow light night day morning evening bird fish horse dog cat boat ship "
    "garden market village town bridge tower door window table chair book song story walk run sing read "
    "write build carry open close green blue red old new small large quiet loud slow fast warm cold"
).split()


ATTRIBUTE, DISTRACTOR_ATTRIBUTE = "code", "color"


def fact_text(key: str, value: str, attribute: str = ATTRIBUTE) -> str:
    return f"The {attribute} of {key} is {value}."


def question_text(key: str) -> str:
    return f"What is the {ATTRIBUTE} of {key}?"


def boxed(value: str) -> str:
    return f"\\boxed{{{value}}}"


@dataclass
class TaskConfig:
    """Sizes of the synthetic task."""

    chunk_tokens: int = field(default=32, metadata={"help": "Tokens per chunk (the agent's chunk_tokens)."})
    num_keys: int = field(default=16, metadata={"help": f"Keys in use, the first ones of {KEYS[:3]}..."})
    min_value: int = field(default=0, metadata={"help": "Smallest code (codes are integers)."})
    max_value: int = field(default=9, metadata={"help": "Largest code (0-9: a code is one token everywhere)."})
    distractor_rate: float = field(
        default=0.5, metadata={"help": "Probability that a non-target chunk holds a distractor fact (a color)."}
    )

    def __post_init__(self):
        if not 2 <= self.num_keys <= len(KEYS):
            raise ValueError(f"num_keys must be in [2, {len(KEYS)}], got {self.num_keys}")
        if not 0 <= self.min_value <= self.max_value:
            raise ValueError(f"need 0 <= min_value <= max_value, got {self.min_value}, {self.max_value}")
        if not 0.0 <= self.distractor_rate <= 1.0:
            raise ValueError(f"distractor_rate must be in [0, 1], got {self.distractor_rate}")
        if self.chunk_tokens < 16:
            raise ValueError(f"chunk_tokens must be at least 16 (a fact and some filler), got {self.chunk_tokens}")

    @property
    def keys(self) -> list[str]:
        return list(KEYS[: self.num_keys])


@dataclass
class Sample:
    """One question with its document, and where its facts sit (what the teacher needs)."""

    key: str
    value: str
    chunks: list[str]
    target_chunk: int
    distractors: dict[int, tuple[str, str]]  # chunk index -> (key, value) of a distractor (color) fact

    @property
    def question(self) -> str:
        return question_text(self.key)

    @property
    def document(self) -> str:
        return "".join(self.chunks)

    def row(self, sample_id: str) -> dict:
        """A row of the project's custom data format (plus the target chunk, for analysis)."""
        return {
            "id": sample_id,
            "prompt": self.question,
            "context": self.document,
            "answers": [self.value],
            "num_chunks": len(self.chunks),
            "target_chunk": self.target_chunk,
        }


def tokenizer_corpus(config: TaskConfig) -> list[str]:
    """Text the tokenizer is trained on: the task's words and the templates, but no multi-digit numbers.

    Codes are left out so that digits stay single tokens: a code then has the same tokens in a chunk, in the
    memory and inside `\\boxed{}`, and copying it is a plain token copy.
    """
    corpus = [" ".join(FILLER_WORDS)] * 20
    for key in config.keys:
        corpus += [fact_text(key, "")[:-2], fact_text(key, "", DISTRACTOR_ATTRIBUTE)[:-2], question_text(key)] * 10
    corpus += ["\\boxed{}", INITIAL_MEMORY] * 10 + ["0123456789"]
    corpus += [MEMORY_TEMPLATE, FINAL_TEMPLATE_BOXED, "system user assistant"] * 20
    return corpus


def template_sentences() -> list[str]:
    """The fixed instruction sentences of the MemAgent prompts (the system prompt included)."""
    sentences = ["You are a helpful assistant."]
    for template in (MEMORY_TEMPLATE, FINAL_TEMPLATE_BOXED.replace("{{}}", "{}")):
        sentences.append(template.split("\n", 1)[0])
    return sentences


def build_task_tokenizer(config: TaskConfig, vocab_size: int = 768):
    """A byte-level BPE trained on the task's text, with each fixed instruction sentence as one added token.

    Keys, filler words and template words become single tokens. The instruction sentences (identical in every
    prompt, never in a document) being one token each cuts a memory-update prompt from ~180 to ~75 tokens, so
    the tiny model spends its compute and attention on the question, the memory and the chunk. The prompts
    are still the exact MemAgent strings: only their tokenization is shorter.
    """
    tokenizer = build_tiny_tokenizer(vocab_size, tokenizer_corpus(config))
    tokenizer.add_tokens([AddedToken(s, normalized=False, special=False) for s in template_sentences()])
    return tokenizer


class TaskGenerator:
    """Draws samples of the task with exact token-level chunk layout for one tokenizer."""

    def __init__(self, tokenizer, config: TaskConfig):
        self.tokenizer = tokenizer
        self.config = config
        self._lengths: dict[str, int] = {}

    def _tokens(self, piece: str) -> int:
        if piece not in self._lengths:
            self._lengths[piece] = len(self.tokenizer.encode(piece, add_special_tokens=False))
        return self._lengths[piece]

    @cached_property
    def _one_token_words(self) -> list[str]:
        words = [w for w in FILLER_WORDS if self._tokens(" " + w) == 1]
        if not words:
            raise ValueError("the tokenizer has no single-token filler word; train it on the task corpus")
        return words

    def _chunk(self, rng: random.Random, fact: str | None) -> str:
        """Filler words (a period now and then) with the fact's sentence at a random place: exactly C tokens."""
        budget = self.config.chunk_tokens
        fact_pieces = [" " + w for w in fact[:-1].split(" ")] + ["."] if fact else []
        fact_tokens = sum(self._tokens(p) for p in fact_pieces)
        filler_budget = budget - fact_tokens
        filler: list[str] = []
        used = 0
        while used < filler_budget:
            left = filler_budget - used
            if filler and filler[-1] != "." and rng.random() < 0.12:
                piece = "."
            else:
                pool = FILLER_WORDS if left > 2 else self._one_token_words
                piece = " " + rng.choice(pool)
            if self._tokens(piece) <= left:
                filler.append(piece)
                used += self._tokens(piece)
        if fact_pieces:
            at = rng.randint(0, len(filler))
            filler[at:at] = fact_pieces
        return "".join(filler)

    def sample(self, rng: random.Random, num_chunks: int) -> Sample:
        """One question and its `num_chunks`-chunk document (target fact in a uniformly drawn chunk)."""
        if num_chunks < 1:
            raise ValueError(f"num_chunks must be at least 1, got {num_chunks}")
        cfg = self.config
        key = rng.choice(cfg.keys)
        value = str(rng.randint(cfg.min_value, cfg.max_value))
        target = rng.randrange(num_chunks)
        distractors = {
            k: (rng.choice(cfg.keys), str(rng.randint(cfg.min_value, cfg.max_value)))
            for k in range(num_chunks)
            if k != target and rng.random() < cfg.distractor_rate
        }
        facts = {k: fact_text(*kv, DISTRACTOR_ATTRIBUTE) for k, kv in distractors.items()}
        facts[target] = fact_text(key, value)
        chunks = [self._chunk(rng, facts.get(k)) for k in range(num_chunks)]
        return Sample(key, value, chunks, target, distractors)

    def check_layout(self, sample: Sample) -> None:
        """Raise unless the document tokenizes into exactly the generator's chunks (what the agent will read)."""
        ids = tokenize_document(self.tokenizer, sample.document)
        chunks = chunk_document(ids, self.config.chunk_tokens)
        expected = [self.tokenizer.encode(c, add_special_tokens=False) for c in sample.chunks]
        if [c.tolist() for c in chunks] != expected:
            raise AssertionError(f"document of key {sample.key!r} does not split into its {len(expected)} chunks")

    def dataset_rows(self, num_samples: int, num_chunks: int, seed: int, prefix: str) -> list[dict]:
        """`num_samples` rows of `num_chunks` chunks, reproducible from `seed`."""
        rng = random.Random(seed)
        return [self.sample(rng, num_chunks).row(f"{prefix}-{i}") for i in range(num_samples)]

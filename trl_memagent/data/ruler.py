"""Synthetic RULER tasks (the paper's out-of-distribution evaluation), built offline.

Task definitions, prompts and defaults follow RULER (NVIDIA/RULER) as vendored in BytedTsinghua-SIA/MemAgent
(`taskutils/memory_data/synthetic/`, `ruler_data_prepare.sh`). As in MemAgent, the question goes to `prompt`
and the haystack to `context`; the agent reads the context chunk by chunk.

Length: each sample's `context` is fitted to `target_tokens` tokens of the given tokenizer (no special
tokens) by searching the number of haystack units (noise lines, essay sentences, distractor needles, list
words, documents) on exact token counts; a sample lands at most half a percent (or one unit) below the
target, never above. Needles go at depths drawn from RULER's 40 evenly spaced points (or given ones), placed
between haystack units. Every random choice comes from a seed derived from (seed, task, target, index).
"""

from __future__ import annotations

import json
import math
import os
import random
import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from tqdm.auto import tqdm

from .haystack import NOISE, VALUE_MAKERS, EssayHaystack, coded_word, pseudo_word, unique_words
from .hotpotqa import join_documents, read_hotpotqa
from .io import write_rows

NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
NIAH_PROMPT = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "What are all the special magic {type_needle_v} for {query} mentioned in the provided text?"
)
VT_PROMPT = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text. "
    "Question: Find all variables that are assigned the value {query} in the text above."
)
CWE_PROMPT = (
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
    "that appear most often. Question: What are the {num} most common words in the above list?"
)
FWE_PROMPT = (
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. Question: Do not provide any explanation. Please ignore the dots '....'. What are "
    "the three most frequently appeared words in the above coded text?"
)
QA_PROMPT = "Answer the question based on the given documents. {query}"

# RULER: np.round(np.linspace(0, 100, num=40)) percent.
RULER_DEPTHS = tuple(round(100 * i / 39) / 100 for i in range(40))


@dataclass(frozen=True)
class NiahTask:
    """Needle in a haystack: `num_keys` keys with `num_values` values each; `num_queries` keys are asked."""

    haystack: Literal["noise", "essay", "needle"]
    key_type: Literal["words", "numbers", "uuids"] = "words"
    value_type: Literal["words", "numbers", "uuids"] = "numbers"
    num_keys: int = 1
    num_values: int = 1
    num_queries: int = 1


@dataclass(frozen=True)
class VariableTrackingTask:
    """Chains `VAR B = VAR A` in noise; the answer is every variable of the first chain."""

    num_chains: int = 1
    num_hops: int = 4


@dataclass(frozen=True)
class CommonWordsTask:
    """A numbered word list where `num_common` words repeat `freq_common` times, the rest `freq_uncommon`."""

    freq_common: int = 30
    freq_uncommon: int = 3
    num_common: int = 10


@dataclass(frozen=True)
class FrequentWordsTask:
    """Coded words with Zipf(alpha) counts; the answer is the three most frequent (the top one is '...')."""

    alpha: float = 2.0
    word_length: int = 6


@dataclass(frozen=True)
class QATask:
    """Questions over documents from a SQuAD (`squad`) or HotpotQA (`hotpotqa`) file, gold plus distractors."""

    dataset: Literal["squad", "hotpotqa"]


RulerTask = NiahTask | VariableTrackingTask | CommonWordsTask | FrequentWordsTask | QATask

# RULER's synthetic.yaml.
RULER_TASKS: dict[str, RulerTask] = {
    "niah_single_1": NiahTask("noise", "words", "numbers"),
    "niah_single_2": NiahTask("essay", "words", "numbers"),
    "niah_single_3": NiahTask("essay", "words", "uuids"),
    "niah_multikey_1": NiahTask("essay", "words", "numbers", num_keys=4),
    "niah_multikey_2": NiahTask("needle", "words", "numbers"),
    "niah_multikey_3": NiahTask("needle", "uuids", "uuids"),
    "niah_multivalue": NiahTask("essay", "words", "numbers", num_values=4),
    "niah_multiquery": NiahTask("essay", "words", "numbers", num_keys=4, num_queries=4),
    "vt": VariableTrackingTask(),
    "cwe": CommonWordsTask(),
    "fwe": FrequentWordsTask(),
    "qa_1": QATask("squad"),
    "qa_2": QATask("hotpotqa"),
}
# The tasks of the paper's OOD table; those needing no data file are the default.
PAPER_TASKS = (
    "niah_single_1",
    "niah_single_2",
    "niah_single_3",
    "niah_multikey_1",
    "niah_multikey_2",
    "niah_multikey_3",
    "niah_multivalue",
    "niah_multiquery",
    "vt",
    "fwe",
    "qa_1",
)
OFFLINE_TASKS = tuple(name for name, task in RULER_TASKS.items() if not isinstance(task, QATask))
PAPER_LENGTHS = (8192, 16384, 32768, 65536, 131072, 262144, 524288)


@dataclass
class RulerConfig:
    """What to build: tasks x target lengths x samples, and where the optional inputs come from."""

    tasks: Sequence[str] = field(default=OFFLINE_TASKS, metadata={"help": f"Task names among {list(RULER_TASKS)}."})
    target_tokens: Sequence[int] = field(
        default=(4096,), metadata={"help": "Token lengths of the context (with the given tokenizer)."}
    )
    num_samples: int = field(default=4, metadata={"help": "Samples per task and length (the paper: 128)."})
    seed: int = field(default=0, metadata={"help": "Base seed; the same seed rebuilds the same samples."})
    haystack_file: str | None = field(
        default=None, metadata={"help": "Text file replacing the built-in essay-like haystack (split in sentences)."}
    )
    squad_file: str | None = field(default=None, metadata={"help": "SQuAD-format JSON for qa_1."})
    hotpotqa_file: str | None = field(default=None, metadata={"help": "HotpotQA distractor JSON for qa_2."})
    depths: Sequence[float] | None = field(
        default=None,
        metadata={"help": "Needle depths in [0, 1], cycled over samples (default: drawn from RULER's 40 points)."},
    )

    def __post_init__(self):
        unknown = [t for t in self.tasks if t not in RULER_TASKS]
        if unknown:
            raise ValueError(f"unknown RULER task(s) {unknown}; known: {list(RULER_TASKS)}")
        if any(t <= 0 for t in self.target_tokens):
            raise ValueError(f"target_tokens must be positive, got {list(self.target_tokens)}")
        if self.num_samples <= 0:
            raise ValueError(f"num_samples must be positive, got {self.num_samples}")
        if self.depths is not None and (not self.depths or any(not 0.0 <= d <= 1.0 for d in self.depths)):
            raise ValueError(f"depths must be a non-empty list of values in [0, 1], got {self.depths}")


def count_tokens(tokenizer, text: str) -> int:
    """Tokens of `text` alone (no special tokens): the length a sample is fitted to."""
    return len(tokenizer.encode(text, add_special_tokens=False, verbose=False))


_MAX_STEPS = 64


def fit_units(
    measure: Callable[[int], int], target: int, guess: int, max_units: int | None = None, slack: int = 0
) -> int:
    """The number of units n whose `measure(n)` (tokens, non-decreasing in n) is at most `target`.

    Secant steps on exact measurements, kept inside the bracket found so far; stops when a fitting n is
    within `slack` tokens of the target or n + 1 is known to overshoot (or `max_units` is reached).
    """
    values: dict[int, int] = {}
    lo: int | None = None
    hi: int | None = None
    upper_bound = max_units if max_units is not None else math.inf
    n = int(min(max(guess, 1), upper_bound))
    for _ in range(_MAX_STEPS):
        c = values[n] = measure(n)
        if c <= target:
            lo = n if lo is None else max(lo, n)
        else:
            hi = n if hi is None else min(hi, n)
        if lo is not None and (target - values[lo] <= slack or lo == max_units):
            return lo
        if hi == 1:
            raise ValueError(f"a single haystack unit already gives {c} tokens, above the target of {target}")
        if lo is not None and hi is not None and hi - lo <= 1:
            return lo
        others = [m for m in values if m != n]
        nearest = min(others, key=lambda m: abs(m - n)) if others else None
        rate = (c - values[nearest]) / (n - nearest) if nearest is not None else 0
        rate = rate if rate > 0 else max(c / n, 1e-9)
        lower = lo + 1 if lo is not None else 1
        upper = hi - 1 if hi is not None else upper_bound
        proposal = math.floor(n + (target - c) / rate)
        if proposal in values or not lower <= proposal <= upper:
            proposal = min(max(proposal, lower), upper)
            if proposal in values:
                proposal = (lower + upper) // 2 if upper != math.inf else 2 * lower
        n = int(proposal)
    if lo is None:
        raise ValueError(f"no number of haystack units fits {target} tokens")
    return lo


class _Draft:
    """One sample's random choices, drawn once; `render(n)` lays them out with n haystack units."""

    prompt: str
    depths: list[float] = []
    max_units: int | None = None

    def render(self, n: int) -> str:
        raise NotImplementedError

    def answers(self, n: int) -> list[str]:
        raise NotImplementedError


def _insert_at_depths(units: list[str], items: Sequence[str], depths: Sequence[float]) -> list[str]:
    """Place item j between units at index round(depth_j * len(units)); depths must be sorted."""
    out = list(units)
    for j, (item, depth) in enumerate(zip(items, depths)):
        out.insert(round(depth * len(units)) + j, item)
    return out


class _NiahDraft(_Draft):
    def __init__(self, task: NiahTask, rng: random.Random, depths: list[float], essay: EssayHaystack):
        self.task, self.essay = task, essay
        make_key, make_value = VALUE_MAKERS[task.key_type], VALUE_MAKERS[task.value_type]
        keys = unique_words(rng, task.num_keys, make_key)
        values = [unique_words(rng, task.num_values, make_value) for _ in keys]
        needles = [
            NEEDLE.format(type_needle_v=task.value_type, key=key, value=value)
            for key, key_values in zip(keys, values)
            for value in key_values
        ]
        rng.shuffle(needles)
        self.needles = needles
        self.depths = sorted(depths)
        queried = sorted(rng.sample(range(task.num_keys), task.num_queries))
        self._answers = [value for k in queried for value in values[k]]
        names = [keys[k] for k in queried]
        query = ", ".join(names[:-1]) + ", and " + names[-1] if len(names) > 1 else names[0]
        prompt, type_v = NIAH_PROMPT, task.value_type
        if task.num_queries * task.num_values == 1:  # RULER's singular wording
            prompt = prompt.replace("Some", "A").replace("are all", "is").replace("are", "is")
            type_v = type_v[:-1]
        self.prompt = prompt.format(type_needle_v=type_v, query=query)
        self._keys = set(keys)
        self._fillers: list[str] = []
        self._filler_rng = random.Random(rng.random())

    def _units(self, n: int) -> list[str]:
        if self.task.haystack == "noise":
            return [NOISE] * n
        if self.task.haystack == "essay":
            return self.essay.sentences(n)
        make_key, make_value = VALUE_MAKERS[self.task.key_type], VALUE_MAKERS[self.task.value_type]
        while len(self._fillers) < n:  # distractor needles, never with a queried key
            key = make_key(self._filler_rng)
            if key not in self._keys:
                value = make_value(self._filler_rng)
                self._fillers.append(NEEDLE.format(type_needle_v=self.task.value_type, key=key, value=value))
        return self._fillers[:n]

    def render(self, n: int) -> str:
        separator = " " if self.task.haystack == "essay" else "\n"
        return separator.join(_insert_at_depths(self._units(n), self.needles, self.depths))

    def answers(self, n: int) -> list[str]:
        return self._answers


class _VariableTrackingDraft(_Draft):
    def __init__(self, task: VariableTrackingTask, rng: random.Random):
        size = task.num_hops + 1
        names = unique_words(rng, task.num_chains * size, lambda r: "".join(r.choices(string.ascii_uppercase, k=5)))
        values = unique_words(rng, task.num_chains, lambda r: str(r.randint(10000, 99999)))
        self.chains = []
        for c in range(task.num_chains):
            chain_vars = names[c * size : (c + 1) * size]
            chain = [f"VAR {chain_vars[0]} = {values[c]}"]
            chain += [f"VAR {chain_vars[j + 1]} = VAR {chain_vars[j]} " for j in range(task.num_hops)]
            self.chains.append((chain, sorted(rng.random() for _ in chain)))
        self._answers = names[:size]
        self.prompt = VT_PROMPT.format(query=values[0])

    def render(self, n: int) -> str:
        sentences = [NOISE + "\n"] * n
        for chain, fractions in self.chains:
            sentences = _insert_at_depths(sentences, chain, fractions)
        return " ".join(sentences).replace(". \n", ".\n")

    def answers(self, n: int) -> list[str]:
        return self._answers


class _CommonWordsDraft(_Draft):
    def __init__(self, task: CommonWordsTask, rng: random.Random, target: int):
        self.task = task
        # RULER lowers the repetitions for short contexts (below 4096 tokens: 6 and 1).
        self.freq = (task.freq_common, task.freq_uncommon) if target >= 4096 else (6, 1)
        self._rng = rng
        self._words: list[str] = []
        self._seen: set[str] = set()
        self._order_seed = rng.random()
        self.prompt = CWE_PROMPT.format(num=task.num_common)

    def _vocabulary(self, n: int) -> list[str]:
        while len(self._words) < n:
            word = pseudo_word(self._rng)
            if word not in self._seen:
                self._seen.add(word)
                self._words.append(word)
        return self._words[:n]

    def render(self, n: int) -> str:
        words = self._vocabulary(self.task.num_common + n)
        common, uncommon = words[: self.task.num_common], words[self.task.num_common :]
        listed = common * self.freq[0] + uncommon * self.freq[1]
        random.Random(self._order_seed).shuffle(listed)
        return " ".join(f"{i}. {word}" for i, word in enumerate(listed, start=1))

    def answers(self, n: int) -> list[str]:
        return self._vocabulary(self.task.num_common)


class _FrequentWordsDraft(_Draft):
    def __init__(self, task: FrequentWordsTask, rng: random.Random, target: int):
        self.task = task
        vocab = unique_words(rng, max(target // 50, 16), lambda r: coded_word(r, task.word_length))
        vocab[0] = "..."  # RULER: the top-ranked word is noise the question says to ignore
        self.vocab = vocab
        weights = [k**-task.alpha for k in range(1, len(vocab) + 1)]
        total = sum(weights)
        self._shares = [w / total for w in weights]
        self._order_seed = rng.random()
        self.prompt = FWE_PROMPT

    def _counts(self, n: int) -> list[int]:
        return [int(n * share) for share in self._shares]

    def render(self, n: int) -> str:
        words = [word for word, count in zip(self.vocab, self._counts(n)) for _ in range(count)]
        random.Random(self._order_seed).shuffle(words)
        return " ".join(words)

    def answers(self, n: int) -> list[str]:
        counts = sorted(zip(self._counts(n)[1:], self.vocab[1:]), key=lambda item: -item[0])
        if len(counts) < 4 or counts[2][0] == counts[3][0]:
            raise ValueError(f"fwe: {n} words are too few for a unique top three; raise the target length")
        return [word for _, word in counts[:3]]


@dataclass
class _QACorpus:
    """Questions with their gold documents (and same-article documents, for SQuAD) over a document pool."""

    questions: list[tuple[str, list[str], list[int], list[int]]]  # (question, answers, gold, related)
    pool: list[str]


def read_squad(path: str) -> _QACorpus:
    """A SQuAD v1.1/v2.0 JSON file: answerable questions; the pool is every unique paragraph, sorted."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(f"{path}: expected SQuAD JSON with a top-level 'data' list")
    pool = sorted({p["context"] for article in data["data"] for p in article["paragraphs"]})
    index = {text: i for i, text in enumerate(pool)}
    questions = []
    for article in data["data"]:
        article_docs = [index[p["context"]] for p in article["paragraphs"]]
        for paragraph in article["paragraphs"]:
            doc = index[paragraph["context"]]
            for qa in paragraph["qas"]:
                answers = list(dict.fromkeys(a["text"] for a in qa.get("answers", [])))
                if qa.get("is_impossible", False) or not answers:
                    continue
                related = [d for d in dict.fromkeys(article_docs) if d != doc]
                questions.append((qa["question"], answers, [doc], related))
    if not questions:
        raise ValueError(f"{path}: no answerable SQuAD questions")
    return _QACorpus(questions, pool)


def _hotpotqa_corpus(path: str) -> _QACorpus:
    split = read_hotpotqa(path, progress=False)
    return _QACorpus([(q.question, [q.answer], q.own_docs, []) for q in split.questions], split.pool)


class _QADraft(_Draft):
    def __init__(self, corpus: _QACorpus, index: int, rng: random.Random, seed: int):
        if index >= len(corpus.questions):
            raise ValueError(f"qa: sample {index} asked for, the file has {len(corpus.questions)} questions")
        question, self._answers, self.gold, related = corpus.questions[index]
        self.prompt = QA_PROMPT.format(query=question)
        taken = set(self.gold) | set(related)
        related = list(related)
        rng.shuffle(related)  # same-article documents first, as RULER does, then the rest of the pool
        others = [d for d in rng.sample(range(len(corpus.pool)), len(corpus.pool)) if d not in taken]
        self.order = related + others
        self.pool = corpus.pool
        self.max_units = len(self.gold) + len(self.order)
        self._seed = seed

    def render(self, n: int) -> str:
        docs = self.gold + self.order[: max(n - len(self.gold), 0)]
        random.Random(self._seed).shuffle(docs)  # RULER: one fixed shuffle seed
        return join_documents(self.pool[d] for d in docs)

    def answers(self, n: int) -> list[str]:
        return self._answers


class _Resources:
    """Inputs shared by all samples of a build, loaded once: the essay haystack and the QA corpora."""

    def __init__(self, config: RulerConfig):
        self.config = config
        self.essay = EssayHaystack.from_file(config.haystack_file) if config.haystack_file else EssayHaystack()
        self._corpora: dict[str, _QACorpus] = {}

    def corpus(self, dataset: str) -> _QACorpus:
        if dataset not in self._corpora:
            path = self.config.squad_file if dataset == "squad" else self.config.hotpotqa_file
            if path is None:
                option = "squad_file (--squad-file)" if dataset == "squad" else "hotpotqa_file (--hotpotqa-file)"
                raise ValueError(f"a {dataset} QA task needs {option}")
            self._corpora[dataset] = read_squad(path) if dataset == "squad" else _hotpotqa_corpus(path)
        return self._corpora[dataset]


def _sample_depths(config: RulerConfig, rng: random.Random, index: int, count: int) -> list[float]:
    if config.depths is None:
        return rng.sample(RULER_DEPTHS, count)
    return [config.depths[(index * count + j) % len(config.depths)] for j in range(count)]


def _draft(name: str, target: int, index: int, resources: _Resources) -> _Draft:
    config = resources.config
    task = RULER_TASKS[name]
    rng = random.Random(f"{config.seed}:{name}:{target}:{index}")
    if isinstance(task, NiahTask):
        count = task.num_keys * task.num_values
        return _NiahDraft(task, rng, _sample_depths(config, rng, index, count), resources.essay)
    if isinstance(task, VariableTrackingTask):
        return _VariableTrackingDraft(task, rng)
    if isinstance(task, CommonWordsTask):
        return _CommonWordsDraft(task, rng, target)
    if isinstance(task, FrequentWordsTask):
        return _FrequentWordsDraft(task, rng, target)
    return _QADraft(resources.corpus(task.dataset), index, rng, config.seed)


def _measure(tokenizer, draft: _Draft, n: int) -> int:
    return count_tokens(tokenizer, draft.render(n))


def iter_ruler_rows(
    name: str, target: int, tokenizer, config: RulerConfig, resources: _Resources | None = None, progress: bool = False
) -> Iterator[dict]:
    """The `config.num_samples` rows of one task at one target length, fitted with `tokenizer`."""
    resources = resources or _Resources(config)
    slack = max(1, target // 200)
    guess = None
    for index in tqdm(range(config.num_samples), desc=f"{name} @ {target}", disable=not progress):
        draft = _draft(name, target, index, resources)
        if guess is None:  # tokens per unit from a small probe, then the search refines on exact counts
            base, probe = count_tokens(tokenizer, draft.render(0)), 32
            per_unit = max((count_tokens(tokenizer, draft.render(probe)) - base) / probe, 1e-3)
            guess = max(int((target - base) / per_unit), 1)
        n = fit_units(partial(_measure, tokenizer, draft), target, guess, draft.max_units, slack)
        guess = n
        context = draft.render(n)
        yield {
            "id": f"{name}-{target}-{index}",
            "task": name,
            "target_tokens": target,
            "prompt": draft.prompt,
            "context": context,
            "answers": list(draft.answers(n)),
            "num_tokens": count_tokens(tokenizer, context),
            "depths": list(draft.depths),
        }


def _features():
    import datasets

    return datasets.Features(
        {
            "id": datasets.Value("string"),
            "task": datasets.Value("string"),
            "target_tokens": datasets.Value("int64"),
            "prompt": datasets.Value("string"),
            "context": datasets.Value("string"),
            "answers": datasets.List(datasets.Value("string")),
            "num_tokens": datasets.Value("int64"),
            "depths": datasets.List(datasets.Value("float64")),
        }
    )


def build_ruler_dataset(tokenizer, config: RulerConfig | None = None, progress: bool = False, **overrides):
    """A synthetic RULER eval set in memory: a `datasets.Dataset` of every task x length x sample.

    Columns: `prompt`, `context`, `answers`, `task`, `target_tokens`, `id`, plus `num_tokens` (the exact
    context length) and `depths` (needle depths, empty for non-NIAH tasks). Pass a `RulerConfig` or its
    fields as keywords, e.g. `build_ruler_dataset(tok, tasks=["niah_single_1"], target_tokens=[8192])`.
    """
    import datasets

    config = config or RulerConfig(**overrides)
    resources = _Resources(config)
    rows = [
        row
        for target in config.target_tokens
        for name in config.tasks
        for row in iter_ruler_rows(name, target, tokenizer, config, resources, progress)
    ]
    return datasets.Dataset.from_list(rows, features=_features())


def write_ruler_ladder(
    tokenizer,
    out_dir: str,
    config: RulerConfig | None = None,
    output_format: Literal["jsonl", "parquet"] = "jsonl",
    progress: bool = True,
    **overrides,
) -> list[str]:
    """Write one file per task and length, `{out_dir}/{task}_{target}.{ext}`, streaming rows; returns the paths."""
    if output_format not in ("jsonl", "parquet"):
        raise ValueError(f"output_format must be 'jsonl' or 'parquet', got {output_format!r}")
    config = config or RulerConfig(**overrides)
    resources = _Resources(config)
    schema = _features().arrow_schema
    paths = []
    for target in config.target_tokens:
        for name in config.tasks:
            path = os.path.join(out_dir, f"{name}_{target}.{output_format}")
            write_rows(iter_ruler_rows(name, target, tokenizer, config, resources, progress), path, schema=schema)
            paths.append(path)
    return paths

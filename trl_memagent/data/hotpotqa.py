"""RULER-HQA: HotpotQA questions in contexts of N Wikipedia paragraphs (the paper's main benchmark).

Construction follows the reference data scripts of BytedTsinghua-SIA/MemAgent
(`taskutils/memory_data/processing.py` and `different_docs_eval.py`):

- a paragraph is `f"{title}\\n{''.join(sentences)}"` (HotpotQA sentences carry their own leading spaces);
- the pool is every unique paragraph of the split, sorted, so paragraph indices do not depend on file order;
- a sample with N documents holds the question's own paragraphs plus N - len(own) paragraphs drawn from the
  rest of the pool, shuffled, and joined as `"\\n\\n".join(f"Document {i}:\\n{doc}")` with i from 1;
- the reference shuffles every sample with `random.Random(4)`: one permutation per N, so the question's own
  paragraphs land on the same slots for every question (`placement="reference"`, `shuffle_seed=4`);
- above 10,000 documents the reference stores document indices instead of text (`index_only_above`).

One difference: the reference lists the own paragraphs in context order, so the two gold paragraphs fall on
different slots (among 10 fixed ones) from question to question. Here the gold paragraphs come first, so in
`reference` placement they sit on the *same two* slots for every question, as the paper describes.
Distractors are drawn per question with a seed derived from (seed, N, question id), so builds repeat exactly.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from .io import file_format, load_file, write_rows

Placement = Literal["reference", "random"]

# The paper's evaluation ladder (documents per sample; ~7K to ~3.5M tokens with Qwen2.5's tokenizer).
PAPER_LADDER = (50, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600)
REFERENCE_SHUFFLE_SEED = 4
INDEX_ONLY_ABOVE = 10_000
POOL_FILE = "pool.parquet"
# Rows per Arrow batch when rebuilding index-only sets: a row of 25,600 documents is ~14 MB of text.
_REBUILD_BATCH_ROWS = 8

FULL_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("context", pa.string()),
        ("answers", pa.list_(pa.string())),
        ("id", pa.string()),
        ("num_docs", pa.int64()),
        ("gold_docs", pa.list_(pa.int64())),
    ]
)
INDEX_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("doc_indices", pa.list_(pa.int64())),
        ("answers", pa.list_(pa.string())),
        ("id", pa.string()),
        ("num_docs", pa.int64()),
        ("gold_docs", pa.list_(pa.int64())),
        ("pool_file", pa.string()),
    ]
)


def paragraph_text(title: str, sentences: Sequence[str]) -> str:
    """One HotpotQA paragraph as the reference renders it: the title, a newline, the sentences concatenated."""
    return f"{title}\n{''.join(sentences)}"


def join_documents(documents: Iterable[str]) -> str:
    """The context of a sample: `Document {i}:\\n{doc}` blocks separated by blank lines, numbered from 1."""
    return "\n\n".join(f"Document {i}:\n{doc}" for i, doc in enumerate(documents, start=1))


@dataclass
class HotpotQAQuestion:
    """A question with its own paragraphs, as indices into the pool, gold (supporting) paragraphs first."""

    id: str
    question: str
    answer: str
    own_docs: list[int]
    num_gold: int


@dataclass
class HotpotQASplit:
    """The questions of a split and its sorted pool of unique paragraphs."""

    questions: list[HotpotQAQuestion]
    pool: list[str] = field(repr=False)


def _context_pairs(row: Mapping[str, Any], where: str) -> list[tuple[str, list[str]]]:
    context = row.get("context")
    if isinstance(context, Mapping):  # Hub layout: {"title": [...], "sentences": [[...], ...]}
        titles, sentences = context.get("title"), context.get("sentences")
        if not isinstance(titles, list) or not isinstance(sentences, list) or len(titles) != len(sentences):
            raise ValueError(f"{where}: 'context' must hold equally long 'title' and 'sentences' lists")
        return list(zip(titles, sentences))
    if isinstance(context, list):  # original JSON layout: [[title, [sentences...]], ...]
        pairs = []
        for k, item in enumerate(context):
            if not (isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[1], list | tuple)):
                raise ValueError(f"{where}: context[{k}] must be [title, [sentences...]], got {item!r:.80}")
            pairs.append((item[0], list(item[1])))
        return pairs
    raise ValueError(f"{where}: missing or malformed 'context' (HotpotQA distractor format expected)")


def _supporting_titles(row: Mapping[str, Any]) -> list[str]:
    facts = row.get("supporting_facts") or []
    if isinstance(facts, Mapping):  # Hub layout: {"title": [...], "sent_id": [...]}
        titles = facts.get("title") or []
    else:  # original layout: [[title, sentence_index], ...]
        titles = [fact[0] for fact in facts]
    return list(dict.fromkeys(titles))


def _question_fields(row: Mapping[str, Any], where: str) -> tuple[str, str, str]:
    qid = row.get("_id", row.get("id"))
    question, answer = row.get("question"), row.get("answer")
    for name, value in (("_id/id", qid), ("question", question), ("answer", answer)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}: field {name!r} must be a non-empty string, got {value!r:.80}")
    return qid, question, answer


def iter_hotpotqa_rows(source: str, split: str = "validation", config: str = "distractor") -> Iterator[Mapping]:
    """Raw HotpotQA rows from a local file or the Hub.

    - the original `hotpot_*_distractor_v1.json` / `hotpot_train_v1.1.json` (a JSON list, read with `json`:
      its mixed `[title, [sentences]]` pairs do not fit an Arrow schema);
    - `.jsonl` / `.parquet` / a JSON list in the Hub layout, through `datasets.load_dataset`;
    - otherwise a Hub dataset name such as `hotpotqa/hotpot_qa`, with `config` and `split`.
    """
    import datasets

    if os.path.isfile(source):
        if source.endswith(".json"):
            with open(source, encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, list):
                raise ValueError(f"{source}: expected a JSON list of HotpotQA questions, got {type(data).__name__}")
            yield from data
            return
        file_format(source)  # a clear error for unsupported extensions
        yield from load_file(source)
        return
    yield from datasets.load_dataset(source, config, split=split)


def read_hotpotqa(
    source: str, split: str = "validation", config: str = "distractor", progress: bool = True
) -> HotpotQASplit:
    """Read a HotpotQA split (distractor setting) into questions and the sorted pool of unique paragraphs.

    Paragraph strings are interned through one dict while reading, so memory holds each unique paragraph
    once (the train split has ~90K questions and ~480K unique paragraphs).
    """
    provisional: dict[str, int] = {}
    questions: list[HotpotQAQuestion] = []
    seen_ids: dict[str, int] = {}
    rows = iter_hotpotqa_rows(source, split, config)
    for index, row in enumerate(tqdm(rows, desc="reading HotpotQA", disable=not progress)):
        where = f"{source}: question {index}"
        qid, question, answer = _question_fields(row, where)
        if qid in seen_ids:
            raise ValueError(f"{where}: duplicate id {qid!r} (first at question {seen_ids[qid]})")
        seen_ids[qid] = index
        pairs = _context_pairs(row, where)
        by_title = {title: paragraph_text(title, sentences) for title, sentences in pairs}
        gold = [by_title[t] for t in _supporting_titles(row) if t in by_title]
        own = list(dict.fromkeys(gold + [paragraph_text(t, s) for t, s in pairs]))
        ids = [provisional.setdefault(text, len(provisional)) for text in own]
        questions.append(HotpotQAQuestion(qid, question, answer, ids, len(dict.fromkeys(gold))))
    if not questions:
        raise ValueError(f"{source}: no HotpotQA questions found")
    pool = sorted(provisional)
    remap = {provisional[text]: rank for rank, text in enumerate(pool)}
    for q in questions:
        q.own_docs = [remap[i] for i in q.own_docs]
    return HotpotQASplit(questions, pool)


def sample_documents(
    question: HotpotQAQuestion,
    num_docs: int,
    pool_size: int,
    placement: Placement = "reference",
    seed: int = 0,
    shuffle_seed: int = REFERENCE_SHUFFLE_SEED,
) -> list[int]:
    """The pool indices of one sample's documents, in context order.

    Distractors come from `random.Random(f"{seed}:{num_docs}:{id}")`; the order from `Random(shuffle_seed)`
    (`reference`: the same permutation for every question of this N) or from a per-question seed (`random`).
    """
    own = question.own_docs
    extra = num_docs - len(own)
    if extra < 0:
        raise ValueError(f"num_docs={num_docs} is below question {question.id!r}'s own {len(own)} paragraphs")
    if extra > pool_size - len(own):
        raise ValueError(f"num_docs={num_docs} needs {extra} distractors but the pool has {pool_size - len(own)} left")
    rng = random.Random(f"{seed}:{num_docs}:{question.id}")
    own_set = set(own)
    # Sampling len(own) more than needed and dropping the question's own paragraphs keeps a uniform draw
    # over the rest of the pool without materializing it.
    distractors = [i for i in rng.sample(range(pool_size), extra + len(own)) if i not in own_set][:extra]
    docs = list(own) + distractors
    if placement == "reference":
        random.Random(shuffle_seed).shuffle(docs)
    elif placement == "random":
        random.Random(f"{seed}:{num_docs}:{question.id}:order").shuffle(docs)
    else:
        raise ValueError(f"placement must be 'reference' or 'random', got {placement!r}")
    return docs


def _gold_numbers(docs: list[int], question: HotpotQAQuestion) -> list[int]:
    gold = set(question.own_docs[: question.num_gold])
    return [position for position, doc in enumerate(docs, start=1) if doc in gold]


def iter_ruler_hqa_rows(
    split: HotpotQASplit,
    num_docs: int,
    questions: Sequence[HotpotQAQuestion] | None = None,
    placement: Placement = "reference",
    seed: int = 0,
    shuffle_seed: int = REFERENCE_SHUFFLE_SEED,
    index_only: bool = False,
    pool_file: str = POOL_FILE,
    progress: bool = True,
) -> Iterator[dict]:
    """Rows of one RULER-HQA set: full text, or (`index_only`) document indices into `pool_file`."""
    chosen = split.questions if questions is None else questions
    for question in tqdm(chosen, desc=f"RULER-HQA N={num_docs}", disable=not progress):
        docs = sample_documents(question, num_docs, len(split.pool), placement, seed, shuffle_seed)
        row = {"prompt": question.question, "answers": [question.answer], "id": question.id, "num_docs": num_docs}
        row["gold_docs"] = _gold_numbers(docs, question)
        if index_only:
            row.update(doc_indices=docs, pool_file=pool_file)
        else:
            row["context"] = join_documents(split.pool[d] for d in docs)
        yield row


def select_questions(
    split: HotpotQASplit, num_questions: int | None = None, ids: Sequence[str] | None = None
) -> list[HotpotQAQuestion]:
    """The questions to build, in order: those of `ids` (e.g. a filtered file's `id` column) or the split's."""
    if ids is None:
        chosen = split.questions
    else:
        by_id = {q.id: q for q in split.questions}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(f"{len(missing)} requested ids are not in the HotpotQA source, e.g. {missing[:3]}")
        chosen = [by_id[i] for i in ids]
    return chosen if num_questions is None else chosen[:num_questions]


def write_pool(pool: Sequence[str], path: str) -> None:
    """Store the paragraph pool once per build (one `text` column, row i = pool index i)."""
    pq.write_table(pa.table({"text": pa.array(pool, pa.string())}), path)


def build_ruler_hqa(
    source: str,
    out_dir: str,
    num_docs: Sequence[int] = PAPER_LADDER,
    num_questions: int | None = 128,
    ids: Sequence[str] | None = None,
    placement: Placement = "reference",
    seed: int = 0,
    shuffle_seed: int = REFERENCE_SHUFFLE_SEED,
    output_format: Literal["parquet", "jsonl"] = "parquet",
    index_only_above: int | None = INDEX_ONLY_ABOVE,
    split: str = "validation",
    config: str = "distractor",
    progress: bool = True,
) -> list[str]:
    """Build RULER-HQA sets for every N of `num_docs` into `out_dir` (`ruler_hqa_{N}.{ext}`); returns the paths.

    Sets with more than `index_only_above` documents per sample (None: never) store document indices into
    `out_dir/pool.parquet`, written once; `load_ruler_hqa` rebuilds their text lazily.
    """
    if output_format not in ("parquet", "jsonl"):
        raise ValueError(f"output_format must be 'parquet' or 'jsonl', got {output_format!r}")
    data = read_hotpotqa(source, split=split, config=config, progress=progress)
    questions = select_questions(data, num_questions, ids)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    pool_written = False
    for n in num_docs:
        index_only = index_only_above is not None and n > index_only_above
        if index_only and not pool_written:
            write_pool(data.pool, os.path.join(out_dir, POOL_FILE))
            pool_written = True
        path = os.path.join(out_dir, f"ruler_hqa_{n}.{output_format}")
        rows = iter_ruler_hqa_rows(
            data, n, questions, placement, seed, shuffle_seed, index_only=index_only, progress=progress
        )
        write_rows(rows, path, schema=INDEX_SCHEMA if index_only else FULL_SCHEMA)
        paths.append(path)
    return paths


def is_index_only(dataset) -> bool:
    """Whether a loaded RULER-HQA file stores document indices instead of text."""
    return "doc_indices" in dataset.column_names and "context" not in dataset.column_names


def _rebuilt_rows(path: str, pool_path: str, stamp: tuple) -> Iterator[dict]:
    """Rows of an index-only file with their text rebuilt (`stamp` keys the `datasets` cache to the files)."""
    pool = pq.read_table(pool_path, columns=["text"]).column("text").to_pylist()
    for row in load_file(path):
        docs = row.pop("doc_indices")
        row.pop("pool_file")
        bad = next((d for d in docs if not 0 <= d < len(pool)), None)
        if bad is not None:
            raise IndexError(f"{path}: row id {row.get('id')!r} points to document {bad}; the pool has {len(pool)}")
        yield {"prompt": row.pop("prompt"), "context": join_documents(pool[d] for d in docs), **row}


def load_ruler_hqa(path: str):
    """Load a RULER-HQA file as a `datasets.Dataset` with a full `context` column.

    Index-only files are rebuilt row by row from the pool into the `datasets` cache (Arrow on disk,
    memory-mapped), so memory stays bounded at any N and every `Dataset` operation sees the text; the
    rebuilt rows equal those of a full build. The cache is reused while the files are unchanged.
    """
    import datasets

    dataset = load_file(path)
    if not is_index_only(dataset):
        return dataset
    pool_files = set(dataset.unique("pool_file"))
    if len(pool_files) != 1:
        raise ValueError(f"{path}: expected one pool file, rows name {sorted(pool_files)}")
    pool_path = os.path.join(os.path.dirname(os.path.abspath(path)), pool_files.pop())
    if not os.path.isfile(pool_path):
        raise FileNotFoundError(f"{path}: its paragraph pool {pool_path!r} is missing (written by the same build)")
    stamp = tuple((os.path.getsize(p), os.path.getmtime(p)) for p in (path, pool_path))
    return datasets.Dataset.from_generator(
        _rebuilt_rows,
        gen_kwargs={"path": os.path.abspath(path), "pool_path": pool_path, "stamp": stamp},
        writer_batch_size=_REBUILD_BATCH_ROWS,
    )

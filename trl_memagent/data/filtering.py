"""Drop questions a model answers without the document (the paper's filter for RULER-HQA).

Reference: BytedTsinghua-SIA/MemAgent `taskutils/memory_data/filter.py` and `filter2.py`. The question alone
goes in one user message with `"{question}\\nYour final answer in \\\\boxed{}.\\n"`; each question gets 2
samples (T=1.0, top_p=0.7, 512 new tokens) from Qwen2.5-7B base and instruct, and a question is dropped when
any sample is correct: its boxed answer matches (the training reward) or a gold answer appears in the text.

Decisions are appended to a JSON Lines sidecar as batches finish; a rerun reads it and only asks about the
remaining questions, so an interrupted filter over 80,000 questions resumes where it stopped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from ..rewards import strict_reward
from .custom import question_text

FILTER_TEMPLATE = "{question}\nYour final answer in \\boxed{{}}.\n"


@dataclass
class FilterConfig:
    """How many samples to draw per question and how long they may be (the backend sets temperature/top-p)."""

    num_samples: int = field(default=2, metadata={"help": "Samples per question (the paper: 2)."})
    max_tokens: int = field(default=512, metadata={"help": "New tokens per sample (the paper: 512)."})
    batch_questions: int = field(
        default=64, metadata={"help": "Questions per backend call; decisions are saved after each call."}
    )


@dataclass
class FilterReport:
    """Counts of one filter run; `resumed` decisions came from the sidecar instead of the model."""

    total: int
    kept: int
    dropped: int
    resumed: int
    sidecar: str

    def __str__(self) -> str:
        share = 100 * self.dropped / self.total if self.total else 0.0
        return (
            f"{self.total} questions: kept {self.kept}, dropped {self.dropped} ({share:.1f}% answered without "
            f"the document); {self.resumed} decisions resumed from {self.sidecar}"
        )


def is_answered(responses: Sequence[str], answers: Sequence[str]) -> bool:
    """Whether any response answers correctly: boxed match (the training reward) or a gold contained in it."""
    for response in responses:
        if strict_reward(response, list(answers)) > 0:
            return True
        lowered = response.lower()
        if any(gold.lower() in lowered for gold in answers):
            return True
    return False


def no_context_prompt_ids(tokenizer, question: str) -> list[int]:
    """The filter prompt: the question alone, asking for a boxed answer, in the tokenizer's chat template."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": FILTER_TEMPLATE.format(question=question)}],
        tokenize=False,
        add_generation_prompt=True,
    )
    return tokenizer.encode(text, add_special_tokens=False)


def read_decisions(sidecar: str) -> dict[str, dict]:
    """Decisions saved by earlier runs, by id. A truncated last line (an interrupted write) is ignored."""
    decisions: dict[str, dict] = {}
    if not os.path.exists(sidecar):
        return decisions
    with open(sidecar, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):  # the last line has no newline yet: cut by an interruption
                break
            raise ValueError(f"{sidecar}: line {number} is not JSON; delete the file to start over") from error
        decisions[record["id"]] = record
    return decisions


def filter_answerable(
    rows: Sequence[dict],
    backend,
    tokenizer,
    sidecar: str,
    config: FilterConfig | None = None,
    progress: bool = True,
) -> tuple[list[bool], FilterReport]:
    """Decide for every row (with `id`, `prompt`, `answers`) whether to keep it; returns (keep mask, report).

    `backend` is any `GenerationBackend` (an `OpenAIBackend` on a served model in practice). Each decision is
    appended to `sidecar` as `{"id", "answered", "responses"}`; ids found there are not asked again.
    """
    config = config or FilterConfig()
    ids = [str(row["id"]) for row in rows]
    if len(set(ids)) != len(ids):
        raise ValueError("filter: row ids must be unique to resume from the sidecar")
    decisions = read_decisions(sidecar)
    resumed = sum(1 for i in ids if i in decisions)
    todo = [k for k, i in enumerate(ids) if i not in decisions]
    if os.path.dirname(sidecar):
        os.makedirs(os.path.dirname(sidecar), exist_ok=True)
    with (
        open(sidecar, "a", encoding="utf-8") as out,
        tqdm(total=len(todo), desc="no-context filter", disable=not progress) as bar,
    ):
        for start in range(0, len(todo), config.batch_questions):
            batch = todo[start : start + config.batch_questions]
            prompts = [no_context_prompt_ids(tokenizer, question_text(rows[k]["prompt"])) for k in batch]
            repeated = [p for p in prompts for _ in range(config.num_samples)]
            generations = backend.generate(repeated, config.max_tokens)
            for j, k in enumerate(batch):
                samples = generations[j * config.num_samples : (j + 1) * config.num_samples]
                responses = [tokenizer.decode(g.completion_ids, skip_special_tokens=True) for g in samples]
                record = {"id": ids[k], "answered": is_answered(responses, rows[k]["answers"]), "responses": responses}
                decisions[ids[k]] = record
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            bar.update(len(batch))
    keep = [not decisions[i]["answered"] for i in ids]
    report = FilterReport(len(ids), sum(keep), len(ids) - sum(keep), resumed, sidecar)
    return keep, report


def filter_file(
    input_path: str,
    output_path: str,
    backend,
    tokenizer,
    sidecar: str | None = None,
    config: FilterConfig | None = None,
    max_kept: int | None = None,
    progress: bool = True,
) -> FilterReport:
    """Filter a custom-format file (or a RULER-HQA file, index-only included) into `output_path`.

    Only `prompt`, `answers` and `id` are read to decide (rows without `id` are named by their index); the
    kept rows are written whole, in order, up to `max_kept`. The sidecar defaults to
    `{output_path}.decisions.jsonl`.
    """
    from .io import file_format, load_file

    dataset = load_file(input_path)
    missing = [c for c in ("prompt", "answers") if c not in dataset.column_names]
    if missing:
        raise ValueError(f"{input_path}: missing column(s) {missing} needed by the filter")
    light = dataset.select_columns([c for c in ("id", "prompt", "answers") if c in dataset.column_names])
    rows = [dict(row, id=row.get("id", str(k))) for k, row in enumerate(light)]
    sidecar = sidecar or f"{output_path}.decisions.jsonl"
    keep, report = filter_answerable(rows, backend, tokenizer, sidecar, config, progress)
    kept = [k for k, flag in enumerate(keep) if flag][:max_kept]
    result = dataset.select(kept)
    if "pool_file" in result.column_names:  # index-only RULER-HQA: keep the pool reachable from the new place
        source_dir = os.path.dirname(os.path.abspath(input_path))
        target_dir = os.path.dirname(os.path.abspath(output_path))
        result = result.map(
            lambda row: {"pool_file": os.path.relpath(os.path.join(source_dir, row["pool_file"]), target_dir)}
        )
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    if file_format(output_path) == "parquet":
        result.to_parquet(output_path)
    else:
        result.to_json(output_path, lines=True, force_ascii=False)
    return report

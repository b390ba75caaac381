"""Scoring one answer by task type, and the summary tables of a results file.

QA tasks (RULER-HQA, RULER qa_*, custom data) use the reference test metrics on the extracted answer:
`sub_em` (the paper's headline), `em`, `f1` against the first gold, and `sub_em_any` against any gold.
Synthetic RULER tasks use RULER's string matches: `ruler_all` (the fraction of references found, which is
also the paper's multi-value reward) is the headline and `ruler_any` is reported beside it.
A sample whose request failed has no score at all: it is counted as failed, never as a wrong answer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

from .. import rewards
from .store import OK

MetricKind = Literal["qa", "ruler"]
HEADLINE = {"qa": "sub_em", "ruler": "ruler_all"}
METRIC_ORDER = ("sub_em", "em", "f1", "sub_em_any", "ruler_all", "ruler_any")
# RULER tasks scored by string match (RULER's qa_* tasks are questions and use the QA metrics).
_RULER_PREFIXES = ("niah", "vt", "cwe", "fwe")


def metric_kind(task: str) -> MetricKind:
    """'ruler' for RULER's retrieval/aggregation tasks (niah_*, vt, cwe, fwe), 'qa' for everything else."""
    return "ruler" if task.split("_")[0] in _RULER_PREFIXES else "qa"


def score_answer(
    raw_answer: str, golds: Sequence[str], kind: MetricKind, template: rewards.AnswerTemplate
) -> tuple[str | None, dict[str, float], float]:
    """(extracted prediction, metrics, headline score) of one final answer.

    The prediction is the answer the template asks for (last `\\boxed{}`, or the text after "the answer is");
    an answer that does not follow the template scores 0 on every metric, as in the reference evaluation.
    """
    prediction = rewards.extract_answer(raw_answer, template)
    if kind == "qa":
        metrics = rewards.qa_metrics(prediction, list(golds))
    elif kind == "ruler":
        text = prediction or ""
        metrics = {
            "ruler_all": rewards.ruler_all_references(text, list(golds)),
            "ruler_any": rewards.ruler_any_reference(text, list(golds)),
        }
    else:
        raise ValueError(f"metric kind must be 'qa' or 'ruler', got {kind!r}")
    return prediction, metrics, metrics[HEADLINE[kind]]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _percent(value: float | None) -> float | None:
    return None if value is None else round(100.0 * value, 4)


def _group_key(record: dict) -> tuple[str, str]:
    return record["task"], record["length"]


def summarize(records: Iterable[dict], expected: Iterable[dict] = (), name: str = "", mode: str = "") -> dict:
    """Accuracy per (task, length) group, per task and overall, from result records.

    `expected` lists the samples of the evaluation (dicts with id, task, length, doc_tokens) so samples not
    run yet are counted as pending. Accuracies are percentages over finished samples only; failed and
    pending samples are counted apart and never enter an accuracy. Nothing time-dependent goes in, so two
    runs that produced the same records have equal summaries.
    """
    by_id = {r["id"]: r for r in records}
    samples = {item["id"]: item for item in expected}
    samples.update(by_id)  # a record knows its measured document length
    groups: dict[tuple[str, str], dict] = {}
    for sample_id, sample in samples.items():
        key = _group_key(sample)
        group = groups.setdefault(key, {"ok": [], "failed": 0, "pending": 0, "tokens": [], "meta": sample})
        record = by_id.get(sample_id)
        if record is None:
            group["pending"] += 1
        elif record.get("status") == OK:
            group["ok"].append(record)
        else:
            group["failed"] += 1
        if sample.get("doc_tokens") is not None:
            group["tokens"].append(sample["doc_tokens"])
    rows = []
    for (task, length), group in groups.items():
        ok = group["ok"]
        names = [m for m in METRIC_ORDER if any(m in r["metrics"] for r in ok)]
        meta = group["meta"]
        rows.append(
            {
                "task": task,
                "length": length,
                "num_docs": meta.get("num_docs"),
                "target_tokens": meta.get("target_tokens"),
                "doc_tokens": round(_mean(group["tokens"]), 1) if group["tokens"] else None,
                "n": len(ok),
                "failed": group["failed"],
                "pending": group["pending"],
                "metric": HEADLINE[metric_kind(task)],
                "accuracy": _percent(_mean([r["score"] for r in ok])),
                "metrics": {m: _percent(_mean([r["metrics"][m] for r in ok if m in r["metrics"]])) for m in names},
            }
        )
    rows.sort(key=lambda row: (row["task"], row["doc_tokens"] or 0.0, row["length"]))
    tasks = {}
    for task in sorted({row["task"] for row in rows}):
        task_rows = [row for row in rows if row["task"] == task]
        tasks[task] = _totals(task_rows, [r for r in by_id.values() if r["task"] == task and r.get("status") == OK])
    ok_all = [r for r in by_id.values() if r.get("status") == OK]
    return {"name": name, "mode": mode, "groups": rows, "tasks": tasks, "overall": _totals(rows, ok_all)}


def _totals(rows: list[dict], ok: list[dict]) -> dict:
    return {
        "n": sum(row["n"] for row in rows),
        "failed": sum(row["failed"] for row in rows),
        "pending": sum(row["pending"] for row in rows),
        "accuracy": _percent(_mean([r["score"] for r in ok])),
    }


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def run_label(summary: dict) -> str:
    """'name (mode)' of a summary, for titles and legends."""
    mode = f"({summary['mode']})" if summary.get("mode") else ""
    return " ".join(part for part in (summary.get("name"), mode) if part)


def summary_markdown(summary: dict) -> str:
    """The summary as Markdown: one row per (task, length) with every metric, then a task x length pivot."""
    title = run_label(summary)
    lines = [f"## {title or 'Evaluation'}", ""]
    metric_names = [m for m in METRIC_ORDER if any(m in row["metrics"] for row in summary["groups"])]
    header = ["task", "length", "doc tokens", "n", "failed", "pending", "accuracy (%)", *metric_names]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in summary["groups"]:
        cells = [row["task"], row["length"], row["doc_tokens"], row["n"], row["failed"], row["pending"]]
        cells += [row["accuracy"], *(row["metrics"].get(m) for m in metric_names)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lengths = _ordered_lengths(summary["groups"])
    lines += ["", "Accuracy (%) by task and length:", ""]
    lines += ["| task | " + " | ".join(lengths) + " | all |", "|" + "---|" * (len(lengths) + 2)]
    for task, totals in summary["tasks"].items():
        by_length = {row["length"]: row["accuracy"] for row in summary["groups"] if row["task"] == task}
        cells = [task, *(by_length.get(length) for length in lengths), totals["accuracy"]]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    overall = summary["overall"]
    lines += [
        "",
        f"Overall: accuracy {_cell(overall['accuracy'])}% over {overall['n']} finished samples; "
        f"{overall['failed']} failed (not scored), {overall['pending']} pending.",
        "",
    ]
    return "\n".join(lines)


def _ordered_lengths(rows: list[dict]) -> list[str]:
    tokens: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        tokens[row["length"]].append(row["doc_tokens"] or 0.0)
    return sorted(tokens, key=lambda length: (_mean(tokens[length]) or 0.0, length))


def length_label(num_docs: int | None, target_tokens: int | None, doc_tokens: int) -> str:
    """How a sample's length is named in tables: its target tokens, else its documents, else a token bucket."""
    if target_tokens is not None:
        return human_tokens(target_tokens)
    if num_docs is not None:
        return f"{num_docs} docs"
    # Custom data: powers-of-two buckets (a document of 5,000 tokens goes to "<=8K").
    return "<=" + human_tokens(2 ** max(math.ceil(math.log2(max(doc_tokens, 1))), 0))


def human_tokens(count: float) -> str:
    """1024 -> '1K', 3_500_000 -> '3.5M', 7000 -> '7K' (base 1000 unless an exact power-of-two K)."""
    if count >= 1_000_000:
        value, unit = count / 1_000_000, "M"
    elif count >= 1000:
        value, unit = (count / 1024, "K") if count % 1024 == 0 else (count / 1000, "K")
    else:
        return str(int(count))
    return f"{value:.3g}{unit}"

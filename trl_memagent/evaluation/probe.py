"""The paper's position probe: RULER-HQA samples with the gold paragraphs placed at chosen relative depths.

For each question and each depth pair (d1, d2), the question's two gold paragraphs are inserted into its
other documents (own distractors plus pool paragraphs, in a per-question random order) at indices
round(d * number of other documents), so depth 0 is the first document and 1 the last. Each depth pair is
its own task (`depth_{d1}_{d2}`), so the harness scores and tabulates them apart and `probe_grid` lays the
accuracies out as a d1 x d2 table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence

from ..data.hotpotqa import HotpotQASplit, join_documents, read_hotpotqa, sample_documents, select_questions
from .store import OK


def place_at_depths(documents: Sequence[int], gold: Sequence[int], depths: Sequence[float]) -> list[int]:
    """`documents` with the `gold` ones moved so that gold[j] sits at relative depth depths[j] among the rest."""
    if len(gold) != len(depths):
        raise ValueError(f"{len(gold)} gold documents but {len(depths)} depths {list(depths)}")
    if any(not 0.0 <= d <= 1.0 for d in depths):
        raise ValueError(f"depths must lie in [0, 1], got {list(depths)}")
    gold_set = set(gold)
    others = [d for d in documents if d not in gold_set]
    placed = list(others)
    # Insert from the deepest (and, at equal depths, the last) down, so an insertion never shifts the slot of
    # one still to come and gold documents at equal depths keep their order.
    for j in sorted(range(len(gold)), key=lambda j: (-depths[j], -j)):
        placed.insert(round(depths[j] * len(others)), gold[j])
    return placed


def task_name(depths: Sequence[float]) -> str:
    return "depth_" + "_".join(f"{d:g}" for d in depths)


def iter_probe_rows(
    split: HotpotQASplit,
    num_docs: int,
    depth_pairs: Sequence[Sequence[float]],
    num_questions: int | None = None,
    seed: int = 0,
) -> Iterator[dict]:
    """One row per (question, depth pair), in the custom data format plus `task`, `num_docs`, `depths`, `gold_docs`."""
    for question in select_questions(split, num_questions):
        gold = question.own_docs[: question.num_gold]
        documents = sample_documents(question, num_docs, len(split.pool), placement="random", seed=seed)
        for depths in depth_pairs:
            if len(depths) != len(gold):
                raise ValueError(
                    f"question {question.id!r} has {len(gold)} gold paragraphs; depth pair {list(depths)} has "
                    f"{len(depths)} depths"
                )
            order = place_at_depths(documents, gold, depths)
            yield {
                "id": f"{question.id}@{task_name(depths)}",
                "task": task_name(depths),
                "prompt": question.question,
                "context": join_documents(split.pool[d] for d in order),
                "answers": [question.answer],
                "num_docs": num_docs,
                "depths": [float(d) for d in depths],
                "gold_docs": [order.index(g) + 1 for g in gold],
            }


def build_position_probe(
    source: str,
    num_docs: int,
    depth_pairs: Sequence[Sequence[float]],
    num_questions: int | None = 32,
    seed: int = 0,
    progress: bool = False,
):
    """A `datasets.Dataset` of the position probe from a HotpotQA source (file or Hub name, distractor setting)."""
    import datasets

    split = read_hotpotqa(source, progress=progress)
    return datasets.Dataset.from_list(list(iter_probe_rows(split, num_docs, depth_pairs, num_questions, seed)))


def probe_grid(records: Sequence[dict]) -> str:
    """Markdown table of accuracy (%) with the first gold's depth as rows and the second's as columns."""
    scores: dict[tuple[float, float], list[float]] = defaultdict(list)
    for record in records:
        depths = record.get("extra", {}).get("depths")
        if record.get("status") == OK and depths and len(depths) == 2:
            scores[tuple(depths)].append(record["score"])
    if not scores:
        return "No finished position-probe samples.\n"
    rows = sorted({d1 for d1, _ in scores})
    columns = sorted({d2 for _, d2 in scores})
    lines = ["| depth 1 \\ depth 2 | " + " | ".join(f"{c:g}" for c in columns) + " |"]
    lines.append("|" + "---|" * (len(columns) + 1))
    for d1 in rows:
        cells = []
        for d2 in columns:
            values = scores.get((d1, d2))
            cells.append(f"{100 * sum(values) / len(values):.2f} (n={len(values)})" if values else "-")
        lines.append(f"| {d1:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

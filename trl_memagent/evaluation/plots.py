"""Accuracy against document length (log scale), with the paper's RULER-HQA curves for reference.

matplotlib is optional (`pip install trl_memagent[plots]`); it is imported only here, with the Agg backend,
so plots are drawn without a display.
"""

from __future__ import annotations

import json
from collections import defaultdict
from importlib import resources

from .metrics import run_label

# The paper's RULER-HQA curves drawn by default (arXiv:2507.02259 v2, sub_em %).
PAPER_MODELS = ("RL-MemAgent-14B", "RL-MemAgent-7B", "Qwen2.5-Instruct-14B-1M", "QwenLong-L1-32B")


class MissingMatplotlib(ImportError):
    """matplotlib is needed to draw plots."""


def load_paper_results() -> dict:
    """The paper's result tables shipped with the package (`trl_memagent/resources/paper_results.json`)."""
    text = resources.files("trl_memagent").joinpath("resources/paper_results.json").read_text(encoding="utf-8")
    return json.loads(text)


def parse_length(label: str) -> float:
    """'7K' -> 7000.0, '1.75M' -> 1750000.0 (the paper's length labels, in tokens)."""
    units = {"K": 1e3, "M": 1e6}
    label = label.strip().upper()
    if label and label[-1] in units:
        return float(label[:-1]) * units[label[-1]]
    return float(label)


def paper_curves(models=PAPER_MODELS, version: str = "v2") -> dict[str, list[tuple[float, float]]]:
    """(tokens, accuracy %) points of the paper's RULER-HQA curves; lengths with no result are left out."""
    table = load_paper_results()["ruler_hqa"]
    lengths = [parse_length(label) for label in table["lengths"]]
    curves = {}
    for model in models:
        if model not in table[version]:
            raise KeyError(f"no RULER-HQA results for {model!r} in the paper tables; known: {sorted(table[version])}")
        curves[model] = [(x, y) for x, y in zip(lengths, table[version][model]) if y is not None]
    return curves


def summary_curve(summary: dict) -> list[tuple[float, float]]:
    """One (tokens, accuracy %) point per length: the mean over tasks of that length, at their mean length."""
    by_length: dict[str, list[dict]] = defaultdict(list)
    for row in summary["groups"]:
        if row["accuracy"] is not None and row["doc_tokens"]:
            by_length[row["length"]].append(row)
    points = [
        (sum(r["doc_tokens"] for r in rows) / len(rows), sum(r["accuracy"] for r in rows) / len(rows))
        for rows in by_length.values()
    ]
    return sorted(points)


def plot_accuracy(
    summaries: list[dict],
    path: str,
    paper_models=PAPER_MODELS,
    title: str = "Accuracy vs document length",
) -> str:
    """Draw one solid curve per summary (label: its name and mode) and the paper's curves dashed; save to `path`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise MissingMatplotlib(
            "plotting needs matplotlib: pip install 'trl_memagent[plots]' (or pip install matplotlib)"
        ) from error
    figure, axes = plt.subplots(figsize=(8, 6))
    for model, points in paper_curves(paper_models).items():
        xs, ys = zip(*points)
        axes.plot(xs, ys, linestyle="--", marker=".", linewidth=1.2, alpha=0.6, label=f"paper RULER-HQA: {model}")
    # Runs often coincide (e.g. all at 0%): shrinking markers of different shapes keep every curve visible.
    markers = "osD^v<>p*h"
    for index, summary in enumerate(summaries):
        points = summary_curve(summary)
        if not points:
            continue
        xs, ys = zip(*points)
        size = max(11 - 2.5 * index, 4)
        axes.plot(
            xs,
            ys,
            linestyle="-",
            marker=markers[index % len(markers)],
            markersize=size,
            linewidth=max(3.0 - 0.6 * index, 1.2),
            label=run_label(summary) or "run",
        )
    axes.set_xscale("log")
    axes.set_ylim(-2, 102)
    axes.set_xlabel("document length (tokens, log scale)")
    axes.set_ylabel("accuracy (%)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path

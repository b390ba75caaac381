"""The results table (markdown) and the plot of the micro reproduction."""

from __future__ import annotations

import os

BEGIN, END = "<!-- micro_repro:results:begin -->", "<!-- micro_repro:results:end -->"
LABELS = {
    "none": "(a) no RL (warm-start)",
    "multi_conv": "(b) multi-conv RL, reward on every conversation",
    "final_only": "(c) RL on the final answer only",
}


def _cell(stats: dict) -> str:
    if len(stats["values"]) > 1:
        return f"{stats['mean']:.1f} ± {stats['std']:.1f}"
    return f"{stats['mean']:.1f}"


def markdown_table(results: dict) -> str:
    """Accuracy and memory retention per sampling, condition and length (mean ± std over RL seeds)."""
    lengths = results["lengths"]
    train = lengths[0]
    header = " | ".join(f"{n} chunks ({n // train}x)" for n in lengths)
    lines = []
    titles = {"accuracy": "accuracy (%)", "memory_kept": "final memory holds the code (%)"}
    for sampling, by_condition in results["table"].items():
        for metric, title in titles.items():
            lines += [f"**{title}, sampling {sampling}**", ""]
            lines += [f"| condition | {header} |", "|---" * (len(lengths) + 1) + "|"]
            for condition, by_length in by_condition.items():
                cells = " | ".join(_cell(by_length[str(n)][metric]) for n in lengths)
                lines.append(f"| {LABELS[condition]} | {cells} |")
            lines.append("")
    seeds = results["config"]["seeds"]
    lines.append(
        f"RL conditions: mean ± standard deviation over seeds {list(seeds)}; "
        f"{results['config']['eval_samples']} questions per length."
    )
    return "\n".join(lines)


def wall_table(results: dict) -> str:
    lines = ["| phase | wall time (s) |", "|---|---|"]
    lines += [f"| {name} | {seconds:.0f} |" for name, seconds in results["wall_seconds"].items()]
    return "\n".join(lines)


def update_doc(path: str, results: dict) -> None:
    """Replace the generated block of `path` (between the markers) with the table and wall times."""
    block = f"{BEGIN}\n{markdown_table(results)}\n\nWall times of this run:\n\n{wall_table(results)}\n{END}"
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else f"# Micro reproduction\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        raise ValueError(f"{path} has no {BEGIN} ... {END} block to fill")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(head + block + tail)


def plot(results: dict, path: str) -> None:
    """Left: accuracy against document length (log x); right: training reward of each RL step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = results["lengths"]
    samplings = list(results["table"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    colors = {"none": "tab:gray", "multi_conv": "tab:blue", "final_only": "tab:orange"}
    for index, sampling in enumerate(samplings):
        for condition, by_length in results["table"][sampling].items():
            means = [by_length[str(n)]["accuracy"]["mean"] for n in lengths]
            stds = [by_length[str(n)]["accuracy"]["std"] for n in lengths]
            left.errorbar(
                lengths,
                means,
                yerr=stds,
                marker="o",
                capsize=3,
                color=colors[condition],
                linestyle="-" if index == 0 else "--",
                alpha=1.0 if index == 0 else 0.6,
                label=LABELS[condition] if index == 0 else None,
            )
    left.set_xscale("log", base=2)
    left.set_xticks(lengths, [f"{n}\n({n // lengths[0]}x)" for n in lengths])
    left.set_xlabel("document length (chunks)")
    left.set_ylabel("accuracy (%)")
    left.set_ylim(-2, 102)
    left.grid(alpha=0.3)
    left.legend(fontsize=8, loc="lower left")
    styles = "; ".join(f"{style}: {label}" for style, label in zip(("solid", "dashed"), samplings))
    left.set_title(f"Accuracy vs length (trained at {lengths[0]} chunks)\n{styles}", fontsize=10)
    for condition, by_seed in results["reward_curves"].items():
        for index, curve in enumerate(by_seed.values()):
            right.plot(
                range(1, len(curve) + 1),
                curve,
                color=colors[condition],
                alpha=0.8,
                label=LABELS[condition] if index == 0 else None,
            )
    right.set_xlabel("RL step")
    right.set_ylabel("mean reward of the step's rollouts")
    right.set_ylim(-0.02, 1.02)
    right.grid(alpha=0.3)
    right.legend(fontsize=8, loc="lower right")
    right.set_title("Training reward (one line per seed)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

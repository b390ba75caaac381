"""Evaluation harness: accuracy across document lengths, baselines, position probe, cost, tables and plots."""

from .harness import EvalConfig, EvalResult, evaluate, evaluate_checkpoint, load_eval_items
from .metrics import score_answer, summarize, summary_markdown
from .plots import plot_accuracy
from .probe import build_position_probe, probe_grid

__all__ = [
    "EvalConfig",
    "EvalResult",
    "build_position_probe",
    "evaluate",
    "evaluate_checkpoint",
    "load_eval_items",
    "plot_accuracy",
    "probe_grid",
    "score_answer",
    "summarize",
    "summary_markdown",
]

"""Data for memory agents: RULER-HQA, synthetic RULER tasks, the no-context filter and the custom format.

Every dataset the project trains or evaluates on has three columns: `prompt` (the question, a string or a
one-user-message conversation), `context` (the document) and `answers` (a non-empty list of strings); more
columns are passed to reward functions. See docs/data.md.
"""

from .custom import REQUIRED_COLUMNS, DataValidationError, load_memagent_dataset, question_text, validate_dataset
from .filtering import FilterConfig, FilterReport, filter_answerable, filter_file, is_answered
from .hotpotqa import PAPER_LADDER, build_ruler_hqa, load_ruler_hqa, read_hotpotqa
from .ruler import (
    OFFLINE_TASKS,
    PAPER_LENGTHS,
    PAPER_TASKS,
    RULER_TASKS,
    RulerConfig,
    build_ruler_dataset,
    write_ruler_ladder,
)

__all__ = [
    "OFFLINE_TASKS",
    "PAPER_LADDER",
    "PAPER_LENGTHS",
    "PAPER_TASKS",
    "REQUIRED_COLUMNS",
    "RULER_TASKS",
    "DataValidationError",
    "FilterConfig",
    "FilterReport",
    "RulerConfig",
    "build_ruler_dataset",
    "build_ruler_hqa",
    "filter_answerable",
    "filter_file",
    "is_answered",
    "load_memagent_dataset",
    "load_ruler_hqa",
    "question_text",
    "read_hotpotqa",
    "validate_dataset",
    "write_ruler_ladder",
]

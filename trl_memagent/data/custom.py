"""The custom data format: `prompt`, `context`, `answers` (plus any columns your reward functions read).

Every loader of the project funnels through `validate_dataset`, which checks every row and raises on the
first bad one with its row index and column; nothing is ever dropped silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

REQUIRED_COLUMNS = ("prompt", "context", "answers")
_ARROW_BATCH_ROWS = 1024


class DataValidationError(ValueError):
    """A dataset does not follow the custom format; the message names the source, the row and the column."""


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def question_text(prompt: str | list[Mapping[str, Any]]) -> str:
    """The question of a `prompt` cell: the string itself, or the content of a one-user-message conversation."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list | tuple) and len(prompt) == 1 and isinstance(prompt[0], Mapping):
        message = prompt[0]
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    raise TypeError(
        "a prompt must be a string or a conversation of exactly one user message "
        f"[{{'role': 'user', 'content': '...'}}], got {_short(prompt)}"
    )


def _row_error(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(column, problem) for the first problem of one row, or None when the row is valid."""
    for column in REQUIRED_COLUMNS:
        if column not in row:
            return column, f"missing column (the row has: {', '.join(sorted(row)) or 'no columns'})"
    try:
        question = question_text(row["prompt"])
    except TypeError as error:
        return "prompt", str(error)
    if not question.strip():
        return "prompt", "empty question"
    context = row["context"]
    if not isinstance(context, str):
        return "context", f"the document must be a string, got {type(context).__name__} {_short(context)}"
    answers = row["answers"]
    if isinstance(answers, str) or not isinstance(answers, list | tuple):
        hint = ' (wrap a single answer in a list: ["..."])' if isinstance(answers, str) else ""
        return "answers", f"must be a non-empty list of strings, got {type(answers).__name__} {_short(answers)}{hint}"
    if not answers:
        return "answers", "must be a non-empty list of strings, got an empty list"
    for k, answer in enumerate(answers):
        if not isinstance(answer, str):
            return "answers", f"answers[{k}] must be a string, got {type(answer).__name__} {_short(answer)}"
        if not answer.strip():
            return "answers", f"answers[{k}] is an empty string"
    return None


def _light_rows(dataset) -> Iterator[dict]:
    """Rows of a plain `datasets.Dataset` whose valid documents are replaced by "".

    Documents are checked on their Arrow column, so a training set holding gigabytes of text is validated
    without building a Python string per document; only invalid cells (nulls) are converted.
    """
    import pyarrow as pa

    missing = [c for c in REQUIRED_COLUMNS if c not in dataset.column_names]
    if missing:
        yield dict.fromkeys(dataset.column_names)  # row 0 reports the missing column
        return
    rows = iter(dataset.select_columns(["prompt", "answers"]))
    for table in dataset.select_columns(["context"]).with_format("arrow").iter(batch_size=_ARROW_BATCH_ROWS):
        column = table.column("context")
        is_text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        nulls = column.is_null().to_pylist()
        for k in range(len(table)):
            row = next(rows)
            row["context"] = "" if is_text and not nulls[k] else column[k].as_py()
            yield row


def validate_dataset(ds_or_rows: Iterable[Mapping[str, Any]], source: str = "dataset"):
    """Check every row of a dataset (a `datasets.Dataset` or any iterable of dicts) against the custom format.

    Raises `DataValidationError` naming `source`, the row index and the column on the first row with a
    missing column, an empty question, a non-string document, or answers that are not a non-empty list of
    non-empty strings. Returns its input unchanged so calls can be chained.
    """
    import datasets

    rows = ds_or_rows
    if isinstance(ds_or_rows, datasets.Dataset) and ds_or_rows.format["type"] is None:
        rows = _light_rows(ds_or_rows)
    count = 0
    for index, row in enumerate(rows):
        problem = _row_error(row)
        if problem is not None:
            column, message = problem
            raise DataValidationError(f"{source}: row {index}, column {column!r}: {message}")
        count += 1
    if count == 0:
        raise DataValidationError(f"{source}: no rows")
    return ds_or_rows


def _adapt_reference_columns(dataset):
    """Map the reference MemAgent layouts onto the custom format, so the released data loads as is.

    Its training parquet keeps the golds in `reward_model.ground_truth`; its evaluation JSON names the
    question `input`. Columns already in the custom format are left alone.
    """
    columns = set(dataset.column_names)
    if "prompt" not in columns and "input" in columns:
        dataset = dataset.rename_column("input", "prompt")
    if "answers" not in columns and "reward_model" in columns:
        dataset = dataset.map(
            lambda row: {"answers": list(row["reward_model"]["ground_truth"])}, desc="answers from reward_model"
        )
    return dataset


def load_memagent_dataset(path_or_name: str, split: str = "train", name: str | None = None, validate: bool = True):
    """Load a dataset in the custom format and validate it.

    `path_or_name` is a local `.parquet`, `.jsonl` or `.json` file (a RULER-HQA index-only file is rebuilt to
    full text, lazily), a local directory `datasets` can read, or a Hub dataset name (`name` is its
    configuration, `split` its split; local files have a single split). The reference MemAgent layouts
    (`reward_model.ground_truth`, `input`) are mapped to `answers` and `prompt`.
    """
    import datasets

    from .io import load_file

    if os.path.isfile(path_or_name):
        from .hotpotqa import is_index_only, load_ruler_hqa

        dataset = load_file(path_or_name)
        if is_index_only(dataset):
            dataset = load_ruler_hqa(path_or_name)
    else:
        dataset = datasets.load_dataset(path_or_name, name, split=split)
    dataset = _adapt_reference_columns(dataset)
    if validate:
        validate_dataset(dataset, source=path_or_name)
    return dataset

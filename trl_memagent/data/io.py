"""Streaming writers and format-by-extension loaders shared by the data builders.

Builders yield one row at a time and the writers flush in bounded batches, so a set of 128 documents of
3.5M tokens never sits in memory at once. Files are written under a temporary name and renamed when
complete: an interrupted build leaves no half-written file behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

# A row group is flushed when it holds this many rows or this many characters of text, whichever first.
_BATCH_ROWS = 256
_BATCH_CHARS = 64 * 1024 * 1024

FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


def file_format(path: str) -> str:
    """The `datasets` builder name for a data file, from its extension."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise ValueError(f"{path!r}: unsupported extension {ext!r}; expected one of {sorted(FORMATS)}")
    return FORMATS[ext]


def load_file(path: str, columns: list[str] | None = None):
    """A local Parquet, JSON Lines or JSON (list of objects) file as a `datasets.Dataset`."""
    import datasets

    if not os.path.isfile(path):
        raise FileNotFoundError(f"No such data file: {path!r}")
    builder = file_format(path)
    kwargs = {"columns": columns} if columns is not None and builder == "parquet" else {}
    dataset = datasets.load_dataset(builder, data_files=path, split="train", **kwargs)
    if columns is not None and builder != "parquet":
        dataset = dataset.select_columns(columns)
    return dataset


def _row_chars(row: dict) -> int:
    return sum(len(v) for v in row.values() if isinstance(v, str))


def _batches(rows: Iterable[dict]) -> Iterator[list[dict]]:
    batch: list[dict] = []
    chars = 0
    for row in rows:
        batch.append(row)
        chars += _row_chars(row)
        if len(batch) >= _BATCH_ROWS or chars >= _BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def write_rows(rows: Iterable[dict], path: str, schema: pa.Schema | None = None) -> int:
    """Write rows to Parquet or JSON Lines (by extension) in bounded batches; returns the row count.

    `schema` fixes the Parquet column types (otherwise inferred from the first batch). A `.json` path is
    written as JSON Lines too, which `datasets.load_dataset("json")` reads the same way.
    """
    builder = file_format(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    count = 0
    try:
        if builder == "parquet":
            writer = None
            for batch in _batches(rows):
                table = pa.Table.from_pylist(batch, schema=schema)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema)
                writer.write_table(table)
                count += len(batch)
            if writer is None:
                pq.write_table(pa.Table.from_pylist([], schema=schema or pa.schema([])), tmp)
            else:
                writer.close()
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    count += 1
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return count

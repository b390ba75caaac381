"""A JSON Lines results file that survives a killed process: one record per sample id, appended durably.

Every batch of records goes to disk in a single `write` followed by `fsync`, so a crash loses at most the
records being written. Opening the store repairs what a crash can leave behind: a truncated last line is
dropped, and failed records (to be retried) are removed, by rewriting the file atomically (temporary file +
`os.replace`). After that, appending never duplicates an id: `write` refuses one that is already finished.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator

OK = "ok"
FAILED = "failed"


def read_records(path: str) -> Iterator[dict]:
    """The complete records of a results file, in file order; a truncated or garbled last line is skipped.

    A garbled line anywhere else means the file was edited or corrupted by something else: it raises.
    """
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):  # an interrupted append
                return
            raise ValueError(f"{path}: line {number} is not valid JSON ({error}); the file is corrupted") from None
        if not isinstance(record, dict) or "id" not in record:
            raise ValueError(f"{path}: line {number} is not a result record (no 'id')")
        yield record


def latest_by_id(records: Iterable[dict]) -> dict[str, dict]:
    """One record per id: a finished record wins over failed ones; among equals the first one is kept."""
    chosen: dict[str, dict] = {}
    for record in records:
        previous = chosen.get(record["id"])
        if previous is None or (previous.get("status") != OK and record.get("status") == OK):
            chosen[record["id"]] = record
    return chosen


class ResultsStore:
    """The results file of one evaluation: finished ids are skipped, failed ids retried."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        records = latest_by_id(read_records(path))
        self.finished: dict[str, dict] = {i: r for i, r in records.items() if r.get("status") == OK}
        self.failed: dict[str, dict] = {i: r for i, r in records.items() if r.get("status") != OK}
        if self.failed or not self._is_clean(len(records)):
            self._rewrite(self.finished.values())

    def _is_clean(self, num_records: int) -> bool:
        """True when the file holds exactly `num_records` complete lines (no duplicate, no partial line)."""
        if not os.path.exists(self.path):
            return True
        with open(self.path, "rb") as handle:
            data = handle.read()
        return (not data or data.endswith(b"\n")) and data.count(b"\n") == num_records

    def _rewrite(self, records: Iterable[dict]) -> None:
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("".join(_line(r) for r in records))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path)

    def write(self, records: list[dict]) -> None:
        """Append records durably (one write, then fsync); an id already finished is an error."""
        for record in records:
            if record["id"] in self.finished:
                raise ValueError(f"sample id {record['id']!r} is already finished in {self.path}")
        data = "".join(_line(r) for r in records).encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        for record in records:
            if record.get("status") == OK:
                self.finished[record["id"]] = record
                self.failed.pop(record["id"], None)
            else:
                self.failed[record["id"]] = record

    def records(self) -> list[dict]:
        """Every current record (finished and failed), one per id."""
        return [*self.finished.values(), *self.failed.values()]


def _line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""Re-splitting conversation rows into micro-batches, as plain functions.

A generation batch of S samples turns into a variable number of rows (one per conversation), different on
every process. The trainer needs exactly `steps_per_generation` micro-batches per process, each with the
same number of rows on every process (collectives in the loss gather per-row tensors). Short micro-batches
are filled with copies of real rows that carry no loss. Inside one optimizer step, which rows share a
micro-batch does not change the gradient (the step is one token mean over all its micro-batches), so rows
of similar length are grouped there to cut padding; which rows go to which optimizer step stays random.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from trl.trainer.utils import pad


@dataclass
class MicroBatch:
    """Row indices of one micro-batch; `padding[j]` marks a filler copy that must carry no loss."""

    rows: list[int]
    padding: list[bool]

    @property
    def real_rows(self) -> list[int]:
        return [row for row, filler in zip(self.rows, self.padding, strict=True) if not filler]


def rows_per_micro_batch(max_rows: int, num_micro_batches: int) -> int:
    """Rows of every micro-batch: the most rows any process holds, spread over the micro-batches."""
    return max(1, math.ceil(max_rows / num_micro_batches))


def split_evenly(items: Sequence[int], parts: int) -> list[list[int]]:
    """`parts` consecutive slices, sizes differing by at most one (unlike `split_tensor_dict`, nothing is dropped)."""
    base, extra = divmod(len(items), parts)
    out, start = [], 0
    for part in range(parts):
        size = base + (part < extra)
        out.append(list(items[start : start + size]))
        start += size
    return out


def plan_micro_batches(
    lengths: Sequence[tuple[int, int]],
    num_steps: int,
    micro_batches_per_step: int,
    batch_rows: int,
    group_by_length: bool = True,
    generator: torch.Generator | None = None,
) -> list[MicroBatch]:
    """Assign rows to `num_steps * micro_batches_per_step` micro-batches of exactly `batch_rows` rows.

    `lengths[i]` is (prompt tokens, completion tokens) of row i. Rows are shuffled and dealt to the
    optimizer steps evenly; inside a step they are ordered by `group_rows` when `group_by_length`, then
    cut into consecutive micro-batches. Each micro-batch is filled up to
    `batch_rows` with copies of its shortest row (or of the process's shortest row when it got none), so
    fillers never widen a batch.
    """
    if not lengths:
        raise ValueError("cannot plan micro-batches without rows")
    if len(lengths) > num_steps * micro_batches_per_step * batch_rows:
        raise ValueError(
            f"{len(lengths)} rows do not fit in {num_steps} x {micro_batches_per_step} micro-batches of {batch_rows}"
        )
    total = [p + c for p, c in lengths]
    shortest = min(range(len(lengths)), key=lambda i: total[i])
    order = torch.randperm(len(lengths), generator=generator).tolist()
    batches = []
    for step_rows in split_evenly(order, num_steps):
        if group_by_length:
            step_rows = group_rows(step_rows, lengths, batch_rows, micro_batches_per_step)
        for start in range(0, micro_batches_per_step * batch_rows, batch_rows):
            rows = step_rows[start : start + batch_rows]
            filler = min(rows, key=lambda i: total[i]) if rows else shortest
            fill = batch_rows - len(rows)
            batches.append(MicroBatch(rows + [filler] * fill, [False] * len(rows) + [True] * fill))
    return batches


def chunked_cost(order: Sequence[int], lengths: Sequence[tuple[int, int]], batch_rows: int) -> int:
    """Tensor cells of consecutive micro-batches of `batch_rows` rows: rows x (widest prompt + widest completion)."""
    cost = 0
    for start in range(0, len(order), batch_rows):
        chunk = order[start : start + batch_rows]
        cost += batch_rows * (max(lengths[i][0] for i in chunk) + max(lengths[i][1] for i in chunk))
    return cost


def group_rows(
    rows: Sequence[int], lengths: Sequence[tuple[int, int]], batch_rows: int, num_batches: int
) -> list[int]:
    """An order of `rows` whose consecutive micro-batches need little padding.

    A micro-batch is as wide as its longest prompt plus its longest completion, a two-dimensional
    criterion, so a few orders are tried and the cheapest kept: by total length, by prompt then
    completion, by completion then prompt, and "strips" (sorted by prompt, cut into groups of whole
    micro-batches, each sorted by completion). Sorts are stable, so ties keep the caller's random order.
    """
    prompt = {i: lengths[i][0] for i in rows}
    completion = {i: lengths[i][1] for i in rows}
    candidates = [
        sorted(rows, key=lambda i: -(prompt[i] + completion[i])),
        sorted(rows, key=lambda i: (-prompt[i], -completion[i])),
        sorted(rows, key=lambda i: (-completion[i], -prompt[i])),
    ]
    by_prompt = candidates[1]
    used = math.ceil(len(rows) / batch_rows)
    for strips in range(2, min(used, num_batches) + 1):
        order = []
        for batch_ids in split_evenly(list(range(used)), strips):
            strip = by_prompt[batch_ids[0] * batch_rows : (batch_ids[-1] + 1) * batch_rows] if batch_ids else []
            order += sorted(strip, key=lambda i: -completion[i])
        candidates.append(order)
    return min(candidates, key=lambda order: chunked_cost(order, lengths, batch_rows))


def padding_fraction(batches: Sequence[MicroBatch], lengths: Sequence[tuple[int, int]]) -> float:
    """Share of the micro-batch tensor cells (rows x (widest prompt + widest completion)) that hold no real token.

    Filler rows count as padding: they are computed but carry no loss.
    """
    cells = real = 0
    for batch in batches:
        width = max(lengths[i][0] for i in batch.rows) + max(lengths[i][1] for i in batch.rows)
        cells += len(batch.rows) * width
        real += sum(sum(lengths[i]) for i in batch.real_rows)
    return 1.0 - real / cells if cells else 0.0


def collate_rows(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    row_weights: Sequence[float],
    pad_token_id: int,
    device: torch.device | str = "cpu",
) -> dict[str, torch.Tensor]:
    """Tensors of one micro-batch, each as wide as its own longest row (no all-padding columns).

    Prompts are left-padded and completions right-padded, as `GRPOTrainer` expects. `loss_weights` is
    the per-token loss weight: the row's weight on its completion tokens, 0 elsewhere.
    """
    prompts = [torch.tensor(ids, dtype=torch.long) for ids in prompt_ids]
    completions = [torch.tensor(ids, dtype=torch.long) for ids in completion_ids]
    completion_mask = pad([torch.ones_like(c) for c in completions], padding_value=0, padding_side="right")
    weights = torch.tensor(list(row_weights), dtype=torch.float32).unsqueeze(1)
    return {
        "prompt_ids": pad(prompts, padding_value=pad_token_id, padding_side="left").to(device),
        "prompt_mask": pad([torch.ones_like(p) for p in prompts], padding_value=0, padding_side="left").to(device),
        "completion_ids": pad(completions, padding_value=pad_token_id, padding_side="right").to(device),
        "completion_mask": completion_mask.to(device),
        "loss_weights": (completion_mask.float() * weights).to(device),
    }


def collate_values(
    values: Sequence[Sequence[float] | None], width: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Right-padded per-token floats (e.g. sampling logprobs); missing rows or values become NaN."""
    out = torch.full((len(values), width), float("nan"))
    for row, vals in enumerate(values):
        if vals:
            vals = [float("nan") if v is None else v for v in vals[:width]]
            out[row, : len(vals)] = torch.tensor(vals, dtype=torch.float32)
    return out.to(device)

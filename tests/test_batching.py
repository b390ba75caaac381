"""Re-splitting conversation rows into micro-batches."""

import random

import pytest
import torch
from trl.trainer.utils import split_tensor_dict

from trl_memagent.batching import (
    collate_rows,
    collate_values,
    padding_fraction,
    plan_micro_batches,
    rows_per_micro_batch,
    split_evenly,
)


def memagent_like_lengths(num_samples, seed=0):
    """Rows of a generation batch: memory turns (long prompt, memory budget) and final turns (short prompt)."""
    rng = random.Random(seed)
    lengths = []
    for _ in range(num_samples):
        for _ in range(rng.randint(1, 8)):
            lengths.append((5000 + rng.randint(100, 1200), rng.randint(200, 1024)))
        lengths.append((rng.randint(100, 1200), rng.randint(5, 300)))
    return lengths


@pytest.mark.parametrize("group_by_length", [True, False])
def test_plan_covers_every_row_once_with_equal_sizes(group_by_length):
    lengths = memagent_like_lengths(12)
    steps, per_step = 2, 3
    batch_rows = rows_per_micro_batch(len(lengths) + 7, steps * per_step)  # another process holds 7 more rows
    plan = plan_micro_batches(lengths, steps, per_step, batch_rows, group_by_length, torch.Generator().manual_seed(0))
    assert len(plan) == steps * per_step
    assert all(len(b.rows) == batch_rows for b in plan)
    assert sorted(r for b in plan for r in b.real_rows) == list(range(len(lengths)))
    for batch in plan:  # fillers are copies of rows of the same micro-batch, so they never widen it
        real = batch.real_rows
        for row, filler in zip(batch.rows, batch.padding, strict=True):
            assert not filler or row in real
    per_step_rows = [sum(len(b.real_rows) for b in plan[s * per_step : (s + 1) * per_step]) for s in range(steps)]
    assert max(per_step_rows) - min(per_step_rows) <= 1


def test_empty_micro_batches_are_filled_with_the_shortest_row():
    lengths = [(10, 5), (3, 2), (8, 8)]
    plan = plan_micro_batches(lengths, 1, 4, 1, True, torch.Generator().manual_seed(0))
    assert [b.real_rows for b in plan[:3]] == [[2], [0], [1]]  # longest first
    assert plan[3].rows == [1] and plan[3].padding == [True]
    with pytest.raises(ValueError, match="do not fit"):
        plan_micro_batches(lengths, 1, 1, 2)


def test_grouping_by_length_halves_padding_at_least():
    lengths = memagent_like_lengths(64, seed=1)
    steps, per_step = 2, 8
    batch_rows = rows_per_micro_batch(len(lengths), steps * per_step)
    grouped = padding_fraction(plan_micro_batches(lengths, steps, per_step, batch_rows, True), lengths)
    shuffled = padding_fraction(plan_micro_batches(lengths, steps, per_step, batch_rows, False), lengths)
    assert grouped <= 0.5 * shuffled, (grouped, shuffled)


def test_padding_fraction_by_hand():
    from trl_memagent.batching import MicroBatch

    lengths = [(4, 2), (2, 3)]
    # width = max prompt 4 + max completion 3 = 7; cells 3 x 7 = 21; real tokens 6 + 5 (the filler is padding)
    assert padding_fraction([MicroBatch([0, 1, 1], [False, False, True])], lengths) == pytest.approx(1 - 11 / 21)


def test_split_evenly_keeps_the_remainder_that_split_tensor_dict_drops():
    rows = list(range(7))
    assert split_evenly(rows, 3) == [[0, 1, 2], [3, 4], [5, 6]]
    dropped = split_tensor_dict({"x": torch.arange(7)}, 3)
    assert sum(len(d["x"]) for d in dropped) == 6


def test_collate_rows_pads_prompts_left_and_completions_right():
    batch = collate_rows([[1, 2, 3], [4]], [[5], [6, 7]], [1.0, 0.0], pad_token_id=0)
    assert batch["prompt_ids"].tolist() == [[1, 2, 3], [0, 0, 4]]
    assert batch["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch["completion_ids"].tolist() == [[5, 0], [6, 7]]
    assert batch["completion_mask"].tolist() == [[1, 0], [1, 1]]
    assert batch["loss_weights"].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    values = collate_values([[0.5], None, [None, -1.0, -2.0]], 2)
    assert values[0, 0] == 0.5 and values[0, 1].isnan() and values[1].isnan().all()
    assert values[2, 0].isnan() and values[2, 1] == -1.0

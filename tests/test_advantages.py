"""Advantages, broadcast to rows, loss weights and importance ratios against hand-computed values."""

import math

import pytest
import torch

from trl_memagent.advantages import broadcast_to_rows, group_advantages, importance_sampling_ratio, row_loss_weights

NAN = float("nan")


def test_paper_advantage_is_reward_minus_group_mean():
    rewards = torch.tensor([[1.0], [0.0], [0.5], [0.5], [1.0], [1.0], [0.0], [1.0]])
    adv, total, zero_std = group_advantages(rewards, torch.ones(1), num_generations=4, scale_rewards="none")
    # groups [1, 0, .5, .5] (mean .5) and [1, 1, 0, 1] (mean .75)
    assert adv.tolist() == [0.5, -0.5, 0.0, 0.0, 0.25, 0.25, -0.75, 0.25]
    assert total.tolist() == rewards.squeeze(1).tolist()
    assert zero_std.tolist() == [False] * 8


def test_group_scaling_weights_and_zero_std():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    adv, total, zero_std = group_advantages(rewards, torch.tensor([1.0, 0.5]), 2, scale_rewards="group")
    assert total.tolist() == [1.0, 0.5, 1.5, 1.5]
    std = math.sqrt(((1 - 0.75) ** 2 + (0.5 - 0.75) ** 2) / 1)  # Bessel-corrected, as TRL
    assert adv[:2].tolist() == pytest.approx([0.25 / (std + 1e-4), -0.25 / (std + 1e-4)])
    assert adv[2:].tolist() == [0.0, 0.0]
    assert zero_std.tolist() == [False, False, True, True]


def test_unscorable_samples_leave_the_baseline_and_get_zero_advantage():
    rewards = torch.tensor([[NAN], [1.0], [0.0], [0.0]])
    adv, _, _ = group_advantages(rewards, torch.ones(1), 4, scale_rewards="none")
    # baseline over the three scorable samples: 1/3
    assert adv.tolist() == pytest.approx([0.0, 2 / 3, -1 / 3, -1 / 3])


def test_batch_scaling_and_normalize_then_sum():
    rewards = torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    adv, _, _ = group_advantages(rewards, torch.ones(1), 2, scale_rewards="batch")
    batch_std = torch.tensor([1.0, 0.0, 1.0, 1.0]).std().item()
    assert adv.tolist() == pytest.approx([0.5 / (batch_std + 1e-4), -0.5 / (batch_std + 1e-4), 0.0, 0.0])
    two = torch.tensor([[1.0, 2.0], [0.0, 2.0]])
    adv, total, _ = group_advantages(two, torch.ones(2), 2, aggregation="normalize_then_sum")
    z = 0.5 / (math.sqrt(0.5) + 1e-4)  # per-function group z-scores: (+z, -z) and (0, 0)
    assert total.tolist() == pytest.approx([z, -z])
    assert adv.tolist() == pytest.approx([z / (math.sqrt(2 * z * z) + 1e-4), -z / (math.sqrt(2 * z * z) + 1e-4)])
    with pytest.raises(ValueError, match="multiple of num_generations"):
        group_advantages(torch.ones(3, 1), torch.ones(1), 2)


def test_advantage_is_written_on_every_row_of_its_rollout():
    rows = broadcast_to_rows(torch.tensor([0.5, -0.5, 0.25]), [0, 0, 0, 1, 2, 2])
    assert rows.tolist() == [0.5, 0.5, 0.5, -0.5, 0.25, 0.25]


def test_loss_weights():
    tokens, samples = [4, 4, 2, 0], [0, 0, 1, 2]
    assert row_loss_weights(tokens, samples, "token") == [1.0, 1.0, 1.0, 1.0]
    weights = row_loss_weights(tokens, samples, "trajectory", scale=3.0)
    assert weights == [3 / 8, 3 / 8, 3 / 2, 0.0]
    # every rollout with tokens carries the same total weight
    per_sample = {}
    for w, t, s in zip(weights, tokens, samples, strict=True):
        per_sample[s] = per_sample.get(s, 0.0) + w * t
    assert per_sample == {0: 3.0, 1: 3.0, 2: 0.0}
    with pytest.raises(ValueError, match="conversation_weighting"):
        row_loss_weights(tokens, samples, "sample")


def test_importance_sampling_ratio():
    old = torch.tensor([[0.0, -1.0, -2.0]])
    sampling = torch.tensor([[0.0, -2.0, NAN]])
    mask = torch.ones(1, 3)
    truncated = importance_sampling_ratio(old, sampling, mask, "token_truncate", None, 2.0)
    assert truncated[0].tolist() == pytest.approx([1.0, 2.0, 1.0])  # e^1 capped at 2, NaN -> ratio 1
    masked = importance_sampling_ratio(old, sampling, mask, "token_mask", None, 2.0)
    assert masked[0].tolist() == pytest.approx([1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="token_truncate"):
        importance_sampling_ratio(old, sampling, mask, "sequence_mask", None, 2.0)

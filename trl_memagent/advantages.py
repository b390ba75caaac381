"""Advantages and per-token loss weights of multi-conversation GRPO, as plain tensor functions.

A rollout (sample) produces several conversations (rows). Its reward comes from the final answer only;
its advantage is written on every row of the rollout (MemAgent §4: A_{i,j,t} = A_i).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from trl.trainer.utils import nanstd


def group_advantages(
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    num_generations: int,
    scale_rewards: str = "none",
    aggregation: str = "sum_then_normalize",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample advantages from the rewards of a whole generation batch, as `GRPOTrainer` computes them.

    `rewards_per_func` is (N, F) with the N samples ordered group by group (G = `num_generations` in a row).
    Returns `(advantages, rewards, is_std_zero)`, each (N,). `scale_rewards="none"` gives r - group mean
    (the paper). Samples for which every reward function returned None (NaN) are left out of the baseline
    and get a zero advantage.
    """
    if rewards_per_func.dim() != 2 or rewards_per_func.size(0) % num_generations:
        raise ValueError(
            f"rewards_per_func must be (N, F) with N a multiple of num_generations={num_generations}, "
            f"got shape {tuple(rewards_per_func.shape)}"
        )
    weights = reward_weights.to(rewards_per_func.device).unsqueeze(0)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        grouped = rewards.view(-1, num_generations)
        mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
        if scale_rewards in ("group", "none"):
            std = nanstd(grouped, dim=1) if num_generations > 1 else torch.zeros_like(grouped[:, 0])
            std = std.repeat_interleave(num_generations)
        elif scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        else:
            raise ValueError(f"scale_rewards must be 'none', 'group' or 'batch', got {scale_rewards!r}")
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + 1e-4)
    elif aggregation == "normalize_then_sum":
        grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.size(1))
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean_k)
        normalized = (grouped - mean_k) / (std_k + 1e-4)
        rewards = (normalized.view_as(rewards_per_func) * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + 1e-4)
    else:
        raise ValueError(
            f"multi_objective_aggregation must be 'sum_then_normalize' or 'normalize_then_sum', got {aggregation!r}"
        )
    is_std_zero = torch.isclose(std, torch.zeros_like(std))
    return torch.nan_to_num(advantages, nan=0.0), rewards, is_std_zero


def broadcast_to_rows(sample_values: torch.Tensor, row_sample_index: Sequence[int]) -> torch.Tensor:
    """The value of each row's sample: the rollout's advantage on every one of its conversations."""
    index = torch.as_tensor(list(row_sample_index), dtype=torch.long, device=sample_values.device)
    return sample_values[index]


def row_loss_weights(
    row_tokens: Sequence[int], row_sample_index: Sequence[int], weighting: str, scale: float = 1.0
) -> list[float]:
    """The per-token loss weight of each row.

    - `"token"`: 1 for every token, so a step's loss is one token mean over all its conversations.
    - `"trajectory"`: `scale / n_i` for the tokens of rollout i, where n_i is the number of loss tokens of
      all its rows. The trainer divides by the sum of the weights of the step, so a step holding whole
      rollouts computes mean_i( mean over the tokens of rollout i ): every rollout weighs the same. `scale`
      must be the same on every process (the trainer uses the global mean of n_i so that weights are about 1
      and TRL's clamp of the normalizer at 1 never binds); it cancels in the normalized loss.
    """
    if weighting == "token":
        return [1.0] * len(row_tokens)
    if weighting != "trajectory":
        raise ValueError(f"conversation_weighting must be 'token' or 'trajectory', got {weighting!r}")
    totals: dict[int, int] = {}
    for tokens, sample in zip(row_tokens, row_sample_index, strict=True):
        totals[sample] = totals.get(sample, 0) + tokens
    return [scale / totals[s] if totals[s] else 0.0 for s in row_sample_index]


def importance_sampling_ratio(
    old_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """Token-level correction for the gap between the sampler (vLLM) and the trainer, as `GRPOTrainer` does.

    Tokens whose sampling logprob is NaN get ratio 1. `mode` is 'token_truncate' (clamp) or 'token_mask'
    (zero the tokens outside [clip_min, clip_max]); sequence modes are rejected by the config.
    """
    diff = torch.nan_to_num((old_logps - sampling_logps) * mask, nan=0.0)
    ratio = torch.exp(diff)
    if mode == "token_truncate":
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    if mode == "token_mask":
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
    raise ValueError(f"vllm_importance_sampling_mode must be 'token_truncate' or 'token_mask', got {mode!r}")

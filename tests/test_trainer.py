"""MultiConvGRPOTrainer on CPU with the tiny model: gradients against an independent computation,
invariance to the batch split, exact per-step token means, real training, LoRA, checkpoints, errors."""

from __future__ import annotations

import os

import pytest
import torch
from configs import CPU_TINY, SGD_STEP, cpu_config
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import ModelConfig, ScriptArguments, TrlParser

from trl_memagent.config import MultiConvGRPOConfig
from trl_memagent.tiny import filler_text
from trl_memagent.trainer import MultiConvGRPOTrainer


def known_reward(completions, completion_ids, **kwargs):
    """A reward the test can recompute: a function of the final answer's token ids that varies within groups."""
    return [(sum(ids) % 5) / 4 for ids in completion_ids]


class RecordingTrainer(MultiConvGRPOTrainer):
    """The real trainer; it only keeps a copy of each rollout so the test can recompute the loss."""

    def _rollout(self, inputs, mode):
        trajectories = super()._rollout(inputs, mode)
        self.recorded = getattr(self, "recorded", []) + [trajectories]
        return trajectories


class GradientRecorder(TrainerCallback):
    """Gradients and parameters right before each optimizer step (after accumulation, before the update)."""

    def __init__(self, model):
        self.model = model
        self.grads, self.params = [], []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        named = dict(self.model.named_parameters())
        self.grads.append({n: p.grad.detach().clone() for n, p in named.items() if p.grad is not None})
        self.params.append({n: p.detach().clone() for n, p in named.items()})


def make_dataset():
    # Documents of 1, 2 and 3 chunks: rollouts differ in their number of conversations.
    return Dataset.from_dict(
        {
            "prompt": ["Who founded the city?", "Which river is the longest?"],
            "context": [filler_text(12, 1), filler_text(50, 2)],
            "answers": [["king"], ["river"]],
        }
    )


def load_policy(model_dir, noise_seed=None):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if noise_seed is not None:  # a policy away from the reference (loaded from model_dir), so the KL term acts
        generator = torch.Generator().manual_seed(noise_seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return model


def make_trainer(
    model_dir, tmp_path, noise_seed=None, callbacks_for=None, cls=RecordingTrainer, dataset=None, **overrides
):
    kwargs = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, **SGD_STEP, **overrides}
    model = load_policy(model_dir, noise_seed)
    trainer = cls(
        model,
        reward_funcs=known_reward,
        args=cpu_config(tmp_path, **kwargs),
        train_dataset=dataset if dataset is not None else make_dataset(),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    recorder = GradientRecorder(trainer.model)
    trainer.add_callback(recorder)
    return trainer, recorder


# --------------------------------------------------------------------------------------------------------
# Independent computation of the loss: plain forward of each conversation, no padding, no batching.


def conversation_logps(model, prompt_ids, completion_ids):
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion_ids).unsqueeze(-1)).squeeze(-1)


def sample_advantages(trajectories, num_generations):
    rewards = torch.tensor(known_reward(None, [t.conversations[-1].completion_ids for t in trajectories]))
    grouped = rewards.view(-1, num_generations)
    return (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)


def expected_loss(policy, ref, conversations, beta, eps=0.2, delta=3.0, old=None):
    """sum_w(token loss) / sum_w over `conversations` = [(prompt, completion, advantage, weight), ...].

    Token loss: PPO-clip with ratio pi/pi_old (capped at `delta`), plus beta * k3 KL to the reference.
    """
    total, weight_sum = 0.0, 0.0
    for index, (prompt, completion, advantage, weight) in enumerate(conversations):
        logps = conversation_logps(policy, prompt, completion)
        old_logps = logps.detach() if old is None else old[index]
        ratio = torch.exp(logps - old_logps)
        clipped = torch.clamp(ratio, 1 - eps, 1 + eps)
        policy_term = -torch.min(torch.clamp(ratio, max=delta) * advantage, clipped * advantage)
        with torch.no_grad():
            ref_logps = conversation_logps(ref, prompt, completion)
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        total = total + weight * (policy_term + beta * kl).sum()
        weight_sum += weight * len(completion)
    return total / weight_sum


def gradient_of(loss, model):
    model.zero_grad()
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def max_abs_diff(a, b):
    assert a.keys() == b.keys()
    return max((a[n] - b[n]).abs().max().item() for n in a)


@pytest.mark.parametrize("weighting", ["token", "trajectory"])
def test_gradient_matches_independent_computation(tiny_model_dir, tmp_path, weighting):
    trainer, recorder = make_trainer(tiny_model_dir, tmp_path, noise_seed=3, conversation_weighting=weighting)
    trainer.train()
    (trajectories,) = trainer.recorded
    assert len({len(t.conversations) for t in trajectories}) > 1, "rollouts should differ in length"
    advantages = sample_advantages(trajectories, 2)
    assert advantages.abs().sum() > 0

    policy = load_policy(tiny_model_dir, noise_seed=3)
    ref = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    conversations = []
    for trajectory, advantage in zip(trajectories, advantages, strict=True):
        n_tokens = trajectory.num_completion_tokens
        weight = 1.0 if weighting == "token" else 1.0 / n_tokens
        conversations += [(c.prompt_ids, c.completion_ids, advantage, weight) for c in trajectory.conversations]
    loss = expected_loss(policy, ref, conversations, beta=1e-3)
    expected = gradient_of(loss, policy)
    diff = max_abs_diff(recorder.grads[0], expected)
    scale = max(g.abs().max().item() for g in expected.values())
    print(f"[{weighting}] max |grad diff| = {diff:.2e} (max |grad| = {scale:.2e})")
    assert scale > 1e-3
    assert diff < 1e-5

    # The KL term is live: dropping it changes the expected gradient far more than the tolerance.
    without_kl = gradient_of(expected_loss(policy, ref, conversations, beta=0.0), policy)
    assert max_abs_diff(without_kl, expected) > 1e-5


def test_update_is_invariant_to_the_batch_split(tiny_model_dir, tmp_path):
    updates, rollouts = {}, {}
    for per_device, accumulation in [(4, 1), (2, 2), (1, 4)]:
        trainer, recorder = make_trainer(
            tiny_model_dir,
            tmp_path / f"{per_device}x{accumulation}",
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=accumulation,
        )
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        trainer.train()
        updates[per_device] = {n: p.detach() - before[n] for n, p in trainer.model.named_parameters()}
        rollouts[per_device] = [[c.completion_ids for c in t.conversations] for t in trainer.recorded[0]]
        assert len(trainer._buffered_inputs) == accumulation
    assert rollouts[4] == rollouts[2] == rollouts[1], "the three runs must train on the same generation batch"
    assert max(u.abs().max().item() for u in updates[4].values()) > 1e-3
    for per_device in (2, 1):
        diff = max_abs_diff(updates[4], updates[per_device])
        print(f"update diff 4x1 vs {per_device}x{4 // per_device}: {diff:.2e}")
        assert diff < 1e-5


def rows_of(micro_batch):
    """(prompt, completion) of each real (weighted) row of a buffered micro-batch."""
    out = []
    for i in range(micro_batch["prompt_ids"].size(0)):
        if micro_batch["tool_mask"][i].sum() == 0:
            continue
        prompt = micro_batch["prompt_ids"][i][micro_batch["prompt_mask"][i].bool()].tolist()
        completion = micro_batch["completion_ids"][i][micro_batch["completion_mask"][i].bool()].tolist()
        out.append((prompt, completion))
    return out


def test_two_optimizer_steps_per_generation_are_exact_token_means(tiny_model_dir, tmp_path):
    trainer, recorder = make_trainer(
        tiny_model_dir,
        tmp_path,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=2,
        steps_per_generation=4,
        max_steps=2,
        learning_rate=0.5,
    )
    trainer.train()
    assert len(trainer.recorded) == 1 and len(recorder.grads) == 2  # one generation, two optimizer steps
    trajectories = trainer.recorded[0]
    advantages = sample_advantages(trajectories, 2)
    owner = {
        (tuple(c.prompt_ids), tuple(c.completion_ids)): i for i, t in enumerate(trajectories) for c in t.conversations
    }
    steps = [rows_of(trainer._buffered_inputs[0]) + rows_of(trainer._buffered_inputs[1])]
    steps.append(rows_of(trainer._buffered_inputs[2]) + rows_of(trainer._buffered_inputs[3]))
    assert sorted(map(len, steps)) == sorted(map(len, steps)) and sum(map(len, steps)) == len(owner)

    ref = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for step, rows in enumerate(steps):
        conversations = [(p, c, advantages[owner[(tuple(p), tuple(c))]], 1.0) for p, c in rows]
        with torch.no_grad():
            old = [conversation_logps(initial, p, c) for p, c, _, _ in conversations]
        policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        policy.load_state_dict(recorder.params[step], strict=False)
        expected = gradient_of(expected_loss(policy, ref, conversations, beta=1e-3, old=old), policy)
        diff = max_abs_diff(recorder.grads[step], expected)
        print(f"optimizer step {step + 1}: {len(rows)} rows, max |grad diff| = {diff:.2e}")
        assert diff < 1e-5
    # Step 2 ran on a moved policy, so its ratios differ from 1 (the check above used old logps for real).
    moved = max((recorder.params[1][n] - recorder.params[0][n]).abs().max().item() for n in recorder.params[0])
    assert moved > 1e-3


def test_config_rejects_options_that_break_with_several_rows_per_rollout(tmp_path):
    base = {"output_dir": str(tmp_path), **CPU_TINY}
    cases = {
        "loss_type": ("grpo", "every conversation"),
        "importance_sampling_level": ("sequence", "per conversation"),
        "off_policy_mask_threshold": (0.5, "per conversation"),
        "conversation_weighting": ("sample", "conversation_weighting"),
    }
    for field, (value, message) in cases.items():
        with pytest.raises(ValueError, match=message):
            MultiConvGRPOConfig(**base, **{field: value})
    with pytest.raises(ValueError, match="multiple of gradient_accumulation_steps"):
        MultiConvGRPOConfig(
            **base, per_device_train_batch_size=2, gradient_accumulation_steps=2, steps_per_generation=3
        )
    # The CLI parses the config with TrlParser; a rejected option fails there with the same reason.
    parser = TrlParser((ScriptArguments, MultiConvGRPOConfig, ModelConfig))
    _, parsed, _ = parser.parse_args_and_config(
        ["--output_dir", str(tmp_path), "--use_cpu", "--chunk_tokens", "64", "--conversation_weighting", "trajectory"]
    )
    assert (parsed.chunk_tokens, parsed.conversation_weighting) == (64, "trajectory")
    with pytest.raises(ValueError, match="every conversation"):
        parser.parse_args_and_config(["--output_dir", str(tmp_path), "--use_cpu", "--loss_type", "grpo"])
    config = MultiConvGRPOConfig(**base)
    assert (config.loss_type, config.scale_rewards, config.beta, config.epsilon, config.delta) == (
        "dapo",
        "none",
        1e-3,
        0.2,
        3.0,
    )


def test_missing_or_empty_columns_are_named(tiny_model_dir, tmp_path):
    good = make_dataset()
    with pytest.raises(ValueError, match="'context'"):
        make_trainer(tiny_model_dir, tmp_path, dataset=good.remove_columns("context"))
    with pytest.raises(ValueError, match="column 'prompt' is empty at row 1"):
        make_trainer(
            tiny_model_dir, tmp_path, dataset=good.map(lambda x, i: {"prompt": "" if i else "q"}, with_indices=True)
        )
    with pytest.raises(ValueError, match="column 'context' is empty at row 0"):
        make_trainer(tiny_model_dir, tmp_path, dataset=Dataset.from_dict({"prompt": ["q"], "context": [None]}))
    with pytest.raises(ValueError, match="column 'context' is empty"):
        make_trainer(tiny_model_dir, tmp_path, dataset=good.map(lambda x: {"context": ""}))
    with pytest.raises(ValueError, match="'document'"):
        make_trainer(tiny_model_dir, tmp_path, dataset=good, context_column="document")
    # One empty document is fine: that rollout is a single final-answer conversation from the initial memory.
    trainer, _ = make_trainer(
        tiny_model_dir, tmp_path, dataset=good.map(lambda x, i: {"context": x["context"] * i}, with_indices=True)
    )
    trainer.train()
    assert sorted({len(t.conversations) for t in trainer.recorded[0]})[0] == 1


def test_full_finetuning_trains_saves_and_resumes(tiny_model_dir, tmp_path):
    common = {
        "max_steps": 2,
        "optim": "adamw_torch",
        "learning_rate": 1e-3,
        "save_strategy": "steps",
        "save_steps": 1,
        "eval_strategy": "no",
        "log_completions": True,
    }
    trainer, _ = make_trainer(tiny_model_dir, tmp_path, **common)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert max((p.detach() - before[n]).abs().max().item() for n, p in trainer.model.named_parameters()) > 1e-4
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2
    for key in (
        "kl",
        "answers/sub_em",
        "answers/strict_reward",
        "memory/clipped_ratio",
        "conversations/mean",
        "frac_reward_zero_std",
    ):
        assert key in logs[0], key
    assert logs[0]["conversations/mean"] > 2
    assert os.path.isfile(tmp_path / "checkpoint-1" / "model.safetensors")
    assert os.listdir(tmp_path / "completions")

    # Resume from the first checkpoint (a generation boundary): the run continues to step 2.
    resumed, _ = make_trainer(tiny_model_dir, tmp_path, **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    assert resumed.state.global_step == 2
    assert len(resumed.recorded) == 1  # generation restarted once, at the boundary
    assert all(torch.isfinite(p).all() for p in resumed.model.parameters())


def test_lora_with_kl_and_evaluation(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    args = cpu_config(
        tmp_path,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        per_device_eval_batch_size=2,
        max_steps=2,
        learning_rate=1e-2,
        eval_strategy="steps",
        eval_steps=2,
    )
    # init_lora_weights=False: B is random, so the policy starts away from the adapter-free reference and the
    # KL term is non-zero from the first step.
    trainer = RecordingTrainer(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        reward_funcs=known_reward,
        args=args,
        train_dataset=make_dataset(),
        eval_dataset=make_dataset(),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    assert trainer.ref_model is None  # the reference is the model with adapters disabled
    lora_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
    base_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" not in n}
    trainer.train()
    train_logs = [h for h in trainer.state.log_history if "kl" in h and "loss" in h]
    assert train_logs and all(h["kl"] > 0 for h in train_logs)
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in train_logs)
    named = dict(trainer.model.named_parameters())
    assert max((named[n].detach() - p).abs().max().item() for n, p in lora_before.items()) > 1e-4
    assert max((named[n].detach() - p).abs().max().item() for n, p in base_before.items()) == 0.0
    eval_logs = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert eval_logs and "eval_reward" in eval_logs[0] and "eval_conversations/mean" in eval_logs[0]
    assert len(trainer.recorded) == 4  # 2 training generations + 2 evaluation batches (2 questions x 2, 2 per batch)
    # Evaluation rollouts sample with the evaluation settings (the paper's validation: T=1.0, top_p=0.7).
    with trainer._generation_backend("eval", 0, 0) as backend:
        assert (backend.sampling["temperature"], backend.sampling["top_p"]) == (1.0, 0.7)
    with trainer._generation_backend("train", 0, 0) as backend:
        assert backend.sampling["top_p"] == 1.0

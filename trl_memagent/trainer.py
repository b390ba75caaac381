"""`MultiConvGRPOTrainer`: MemAgent's multi-conversation GRPO as a subclass of TRL's `GRPOTrainer`.

Only generation changes. Each sample of the generation batch is read by the memory agent (one
conversation per chunk plus the final answer); every conversation becomes one training row carrying its
rollout's advantage. TRL's loss (`_compute_loss`), reward functions (`_calculate_rewards`), samplers,
training step and logging run unchanged: rows are re-split into exactly `steps_per_generation`
micro-batches with the same row count on every process, and each micro-batch's `num_items_in_batch` is
set so that every optimizer step is an exact (weighted) token mean over its micro-batches.

Per-token loss weights travel in the `tool_mask` field, which TRL multiplies into the loss mask
(`mask = completion_mask * tool_mask`): filler rows get 0, real rows 1 (`conversation_weighting="token"`)
or 1/n_i scaled (`"trajectory"`); the attention mask (`completion_mask`) stays intact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import torch
from accelerate.utils import gather_object
from datasets import Dataset, IterableDataset
from transformers.utils import is_peft_available
from trl import GRPOTrainer
from trl.data_utils import is_conversational
from trl.extras.profiling import profiling_context
from trl.models import unwrap_model_for_generation
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import nanmax, nanmin, nanstd, use_adapter

from .advantages import broadcast_to_rows, group_advantages, importance_sampling_ratio, row_loss_weights
from .backends import TransformersBackend
from .batching import collate_rows, collate_values, padding_fraction, plan_micro_batches, rows_per_micro_batch
from .config import MultiConvGRPOConfig
from .model_card import MEMAGENT_CITATION, MemAgentModelCardMixin
from .rewards import extract_answer, memagent_reward, qa_metrics, strict_reward
from .rollout import MemoryAgent, Trajectory, prepare_inputs
from .vllm_backends import VLLMColocateBackend, VLLMServerBackend, colocate_session

if is_peft_available():
    from peft import PeftModel


@dataclass
class Row:
    """One conversation of one rollout: a training row."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None
    sample: int  # local index of the rollout (dataset sample x generation) in the generation batch
    turn: int  # 0..K-1 memory updates, K the final answer
    weight: float = 1.0  # per-token loss weight (0 for conversations excluded from the loss)


def flatten_trajectories(trajectories: list[Trajectory], mask_truncated: bool = False) -> list[Row]:
    """One row per conversation, tagged with its sample and turn; `mask_truncated` zeroes rows cut at their limit."""
    rows = []
    for sample, trajectory in enumerate(trajectories):
        for turn, conv in enumerate(trajectory.conversations):
            weight = 0.0 if mask_truncated and conv.finish_reason == "length" else 1.0
            rows.append(Row(conv.prompt_ids, conv.completion_ids, conv.logprobs, sample, turn, weight))
    return rows


def question_text(prompt, row: int) -> str:
    """The question of a dataset row: a string, or a conversation made of one user message."""
    if isinstance(prompt, str):
        return prompt
    if (
        isinstance(prompt, list)
        and len(prompt) == 1
        and isinstance(prompt[0], dict)
        and prompt[0].get("role") == "user"
        and isinstance(prompt[0].get("content"), str)
    ):
        return prompt[0]["content"]
    raise ValueError(
        f"row {row}: `prompt` must be the question as a string or as one user message "
        f"[{{'role': 'user', 'content': ...}}], got {prompt!r:.200}"
    )


def _empty_values(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Per row: null, or an empty string or list."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return pc.or_kleene(pc.is_null(values), pc.equal(pc.utf8_length(values), 0))
    if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
        return pc.or_kleene(pc.is_null(values), pc.equal(pc.list_value_length(values), 0))
    return pc.is_null(values)


def check_dataset_columns(dataset, name: str, question_column: str, context_column: str) -> None:
    """Fail early, naming the column, when the question or document column is missing or empty.

    Every question must be non-empty. A single empty document is allowed (the agent then answers from its
    initial memory) but not a missing one (null), nor a column where every document is empty.
    """
    if dataset is None:
        return
    if isinstance(dataset, dict):
        for key, split in dataset.items():
            check_dataset_columns(split, f"{name}[{key!r}]", question_column, context_column)
        return
    available = dataset.column_names
    if available is None:  # an IterableDataset with unknown features: checked row by row at rollout time
        return
    for column in (question_column, context_column):
        if column not in available:
            raise ValueError(f"{name} has no column {column!r} (columns: {available}).")
    if not isinstance(dataset, Dataset):
        return
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty.")
    questions, documents = dataset.data.column(question_column), dataset.data.column(context_column)
    for column, bad in ((question_column, _empty_values(questions)), (context_column, pc.is_null(documents))):
        if pc.any(bad).as_py():
            raise ValueError(f"{name}: column {column!r} is empty at row {pc.index(bad, True).as_py()}.")
    if pc.all(_empty_values(documents)).as_py():
        raise ValueError(f"{name}: column {context_column!r} is empty (no row has a document).")


class MultiConvGRPOTrainer(MemAgentModelCardMixin, GRPOTrainer):
    """GRPO over MemAgent rollouts: one row per conversation, the rollout's advantage on each of them.

    Args mirror `GRPOTrainer` (without tools, rollout functions or environments). `reward_funcs` defaults to
    `trl_memagent.rewards.memagent_reward` (the paper's boxed exact-match verifier, reading `answers`).
    The dataset holds the question (`prompt`: a string or one user message) and the document
    (`args.context_column`); its other columns are passed to the reward functions.
    """

    _tag_names = ["trl", "memagent", "grpo"]
    _name = "MultiConv GRPO"
    _paper = {
        "title": "MemAgent: Reshaping Long-Context LLM with Multi-Conv RL-based Memory Agent",
        "id": "2507.02259",
        "citation": MEMAGENT_CITATION,
    }

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: MultiConvGRPOConfig | None = None,
        train_dataset: Dataset | IterableDataset | None = None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_classes=None,
        callbacks=None,
        optimizers=(None, None),
        quantization_config=None,
        peft_config=None,
    ):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = MultiConvGRPOConfig(f"{name.split('/')[-1]}-MultiConvGRPO")
        if not isinstance(args, MultiConvGRPOConfig):
            raise TypeError(f"args must be a MultiConvGRPOConfig, got {type(args).__name__}")
        if train_dataset is None:
            raise ValueError("train_dataset is required: it holds the questions and their documents.")
        check_dataset_columns(train_dataset, "train_dataset", "prompt", args.context_column)
        check_dataset_columns(eval_dataset, "eval_dataset", "prompt", args.context_column)
        super().__init__(
            model,
            reward_funcs=[memagent_reward] if reward_funcs is None else reward_funcs,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            reward_processing_classes=reward_processing_classes,
            callbacks=callbacks,
            optimizers=optimizers,
            quantization_config=quantization_config,
            peft_config=peft_config,
        )
        self.memory_config = args.memory_agent_config()
        sharded_forward = self.is_fsdp_enabled or (
            self.is_deepspeed_enabled
            and self.accelerator.state.deepspeed_plugin.zero_stage == 3
            and not args.ds3_gather_for_generation
        )
        if sharded_forward and not self.use_vllm:
            # Processes read documents of different lengths, so they make different numbers of `generate` calls;
            # with sharded parameters every forward is a collective and that would hang.
            raise ValueError(
                "Generating with transformers under FSDP or DeepSpeed ZeRO-3 without ds3_gather_for_generation is "
                "not supported: processes run different numbers of memory turns. Use use_vllm=True, or ZeRO-3 with "
                "ds3_gather_for_generation=True."
            )

    # ------------------------------------------------------------------------------------------------
    # Batching: one generation per `steps_per_generation * num_iterations` micro-steps, served pre-split.

    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return self._generate_and_score_completions(generation_batch)[0]
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            # `_buffered_inputs` is None after a resume: generation restarts at the generation boundary.
            self._buffered_inputs = self._generate_and_score_completions(generation_batch)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # ------------------------------------------------------------------------------------------------
    # Rollout

    def _rollout(self, inputs: list[dict], mode: str) -> list[Trajectory]:
        """Run the memory agent on every sample of the local batch (documents tokenized once per string)."""
        column = self.args.context_column
        questions = [question_text(x["prompt"], i) for i, x in enumerate(inputs)]
        prepared = prepare_inputs(self._tokenizer, self.memory_config, questions, [x.get(column) for x in inputs])
        # Every process must make the same number of (collective) generation calls: the most turns anywhere.
        local_turns = prepared.num_turns
        global_turns = int(self.accelerator.gather(torch.tensor([local_turns], device=self.accelerator.device)).max())
        with self._generation_backend(mode, local_turns, global_turns) as backend:
            return MemoryAgent(backend, self._tokenizer, self.memory_config).run_prepared(prepared)

    @contextlib.contextmanager
    def _generation_backend(self, mode: str, local_turns: int, global_turns: int) -> Iterator:
        """The backend of one rollout: transformers `generate`, or vLLM (server or colocate) after a weight sync."""
        temperature = self.temperature if mode == "train" else self.args.eval_temperature
        top_p = self.top_p if mode == "train" else self.args.eval_top_p
        if not self.use_vllm:
            with (
                profiling_context(self, "transformers.generate"),
                unwrap_model_for_generation(
                    self.model_wrapped,
                    self.accelerator,
                    gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                    generation_kwargs=self.generation_kwargs,
                    gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
                ) as unwrapped_model,
                torch.no_grad(),
                self._dist.summon_full_params(self.model_wrapped, recurse=False),
            ):
                yield TransformersBackend(
                    unwrapped_model, self._tokenizer, temperature=temperature, top_p=top_p, top_k=self.top_k
                )
            return
        if self.state.global_step != self._last_loaded_step:
            with profiling_context(self, "sync_weights"):
                self.vllm_generation.sync_weights()
            self._last_loaded_step = self.state.global_step
        sampling = {
            "temperature": temperature,
            "top_p": top_p,
            "top_k": self.top_k,
            "min_p": 0.0 if self.min_p is None else self.min_p,
            "repetition_penalty": self.repetition_penalty,
        }
        eos = set(self.eos_token_ids)
        if self.vllm_mode == "server":
            client = self.vllm_generation.vllm_client if self.accelerator.is_main_process else None
            sampling["generation_kwargs"] = self.args.generation_kwargs
            with profiling_context(self, "vLLM.generate"):
                yield VLLMServerBackend(client, self.accelerator, sampling, eos, local_turns, global_turns)
            return
        sampling.update(self.args.generation_kwargs or {})
        tp_group = getattr(self.vllm_generation, "tp_group", None) if self.vllm_tensor_parallel_size > 1 else None
        with colocate_session(self.vllm_generation), profiling_context(self, "vLLM.generate"):
            yield VLLMColocateBackend(self.vllm_generation.llm, sampling, eos, local_turns, global_turns, tp_group)

    # ------------------------------------------------------------------------------------------------
    # Generation batch -> scored, re-split micro-batches

    def _generate_and_score_completions(self, inputs: list[dict]) -> list[dict[str, torch.Tensor]]:
        """Roll out, score and split the local generation batch; returns its micro-batches (one in eval)."""
        device = self.accelerator.device
        mode = "train" if self.model.training else "eval"
        trajectories = self._rollout(inputs, mode)

        # Rewards on the final answers only, advantages per group, then on every row of the rollout.
        prompts = [x["prompt"] for x in inputs]
        conversational = is_conversational({"prompt": prompts[0]})
        completions = [
            [{"role": "assistant", "content": t.answer}] if conversational else t.answer for t in trajectories
        ]
        answer_ids = [t.conversations[-1].completion_ids for t in trajectories]
        rewards_per_func = self._calculate_rewards(inputs, prompts, completions, answer_ids)
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        advantages, rewards, is_std_zero = group_advantages(
            rewards_per_func,
            self.reward_weights,
            num_generations,
            self.scale_rewards,
            self.multi_objective_aggregation,
        )
        start = self.accelerator.process_index * len(inputs)
        local_advantages = advantages[start : start + len(inputs)]

        rows = flatten_trajectories(trajectories, self.mask_truncated_completions)
        row_tokens = [len(r.completion_ids) if r.weight else 0 for r in rows]
        scale = 1.0
        if self.args.conversation_weighting == "trajectory":
            counts = torch.tensor([float(sum(row_tokens)), float(len(trajectories))], device=device)
            totals = self.accelerator.reduce(counts, reduction="sum")
            scale = (totals[0] / totals[1]).item()
        weights = row_loss_weights(row_tokens, [r.sample for r in rows], self.args.conversation_weighting, scale)
        for row, weight in zip(rows, weights, strict=True):
            row.weight *= weight
        row_advantages = broadcast_to_rows(local_advantages, [r.sample for r in rows])

        batches, plan, lengths = self._micro_batches(rows, row_advantages, mode)
        self._log_generation(mode, inputs, trajectories, rows, rewards_per_func, rewards, advantages, is_std_zero)
        self._metrics[mode]["batching/padding_fraction"].append(
            self.accelerator.reduce(torch.tensor(padding_fraction(plan, lengths), device=device), "mean").item()
        )
        self._metrics[mode]["batching/rows_per_micro_batch"].append(float(len(plan[0].rows)))
        return batches

    def _micro_batches(self, rows: list[Row], row_advantages: torch.Tensor, mode: str):
        """Split rows into micro-batches (same row count on every process), with old/ref logps and normalizers."""
        device = self.accelerator.device
        args = self.args
        if mode == "train":
            steps, per_step = (
                args.steps_per_generation // args.gradient_accumulation_steps,
                args.gradient_accumulation_steps,
            )
        else:
            steps, per_step = 1, 1
        max_rows = int(self.accelerator.gather(torch.tensor([len(rows)], device=device)).max())
        lengths = [(len(r.prompt_ids), len(r.completion_ids)) for r in rows]
        plan = plan_micro_batches(
            lengths, steps, per_step, rows_per_micro_batch(max_rows, steps * per_step), args.group_by_length
        )
        generate_every = args.steps_per_generation * self.num_iterations
        need_old = args.gradient_accumulation_steps % generate_every != 0 or (
            self.use_vllm and self.vllm_importance_sampling_correction
        )
        batches, step_weights, is_stats = [], torch.zeros(steps, device=device), []
        for index, micro in enumerate(plan):
            picked = [rows[i] for i in micro.rows]
            weights = [0.0 if filler else r.weight for r, filler in zip(picked, micro.padding, strict=True)]
            batch = collate_rows(
                [r.prompt_ids for r in picked], [r.completion_ids for r in picked], weights, self.pad_token_id, device
            )
            advantages = row_advantages[micro.rows].clone()
            advantages[torch.tensor(micro.padding, device=advantages.device)] = 0.0
            batch["advantages"] = advantages
            batch["tool_mask"] = batch.pop("loss_weights")
            step_weights[index // per_step] += batch["tool_mask"].sum()
            self._add_logps(batch, picked, need_old, is_stats)
            batches.append(batch)
        step_weights = self.accelerator.reduce(step_weights, reduction="sum")
        for index, batch in enumerate(batches):
            # TRL divides by num_items_in_batch / num_processes * GA / steps_per_generation (train) or
            # num_items_in_batch / num_processes (eval); DDP averages over processes and accumulation sums
            # the micro-batches, so this makes each optimizer step sum(weight * loss) / sum(weight) over its rows.
            factor = args.steps_per_generation / args.gradient_accumulation_steps if mode == "train" else 1.0
            batch["num_items_in_batch"] = step_weights[index // per_step] * factor
        if is_stats:
            self._log_importance_sampling(mode, is_stats)
        return batches, plan, lengths

    @property
    def pad_token_id(self) -> int:
        return self._tokenizer.pad_token_id

    def _add_logps(self, batch: dict, picked: list[Row], need_old: bool, is_stats: list) -> None:
        """Old-policy and reference logps (no grad) and the vLLM importance-sampling ratio of one micro-batch."""
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        logits_to_keep = batch["completion_ids"].size(1)
        # A training micro-batch is forwarded whole, as in the loss; the single eval batch holds every row of the
        # eval batch, so it goes per_device_eval_batch_size rows at a time.
        chunk = None if self.model.training else self.args.per_device_eval_batch_size
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            if need_old:
                batch["old_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                    self.model, input_ids, attention_mask, logits_to_keep, batch_size=chunk
                )
            if self.beta != 0.0:
                if self.ref_model is not None:
                    ref, _, _ = self._get_per_token_logps_and_entropies(
                        self.ref_model, input_ids, attention_mask, logits_to_keep, batch_size=chunk
                    )
                else:  # PEFT: the reference is the model with its adapters disabled (or the frozen "ref" adapter)
                    unwrapped = self.accelerator.unwrap_model(self.model)
                    adapter = "ref" if isinstance(unwrapped, PeftModel) and "ref" in unwrapped.peft_config else None
                    with use_adapter(unwrapped, adapter_name=adapter):
                        ref, _, _ = self._get_per_token_logps_and_entropies(
                            self.model, input_ids, attention_mask, logits_to_keep, batch_size=chunk
                        )
                batch["ref_per_token_logps"] = ref
        if self.use_vllm and self.vllm_importance_sampling_correction:
            sampling = collate_values([r.logprobs for r in picked], logits_to_keep, input_ids.device)
            mask = batch["completion_mask"]
            batch["importance_sampling_ratio"] = importance_sampling_ratio(
                batch["old_per_token_logps"],
                sampling,
                mask,
                self.vllm_importance_sampling_mode,
                self.vllm_importance_sampling_clip_min,
                self.vllm_importance_sampling_clip_max,
            )
            real = (batch["tool_mask"] > 0) & mask.bool()
            delta = (batch["old_per_token_logps"] - sampling)[real & ~torch.isnan(sampling)].abs()
            is_stats.append((delta, batch["importance_sampling_ratio"][real]))

    # ------------------------------------------------------------------------------------------------
    # Metrics and logs

    def _log_importance_sampling(self, mode: str, is_stats: list) -> None:
        device = self.accelerator.device
        delta = torch.cat([d for d, _ in is_stats])
        ratio = torch.cat([r for _, r in is_stats])

        def stat(values: torch.Tensor, fn) -> torch.Tensor:
            return fn(values) if values.numel() else torch.tensor(float("nan"), device=device)

        metrics = self._metrics[mode]
        metrics["sampling/sampling_logp_difference/mean"].append(
            self.accelerator.gather(stat(delta, torch.mean)).nanmean().item()
        )
        metrics["sampling/sampling_logp_difference/max"].append(
            nanmax(self.accelerator.gather(stat(delta, torch.max))).item()
        )
        metrics["sampling/importance_sampling_ratio/min"].append(
            nanmin(self.accelerator.gather(stat(ratio, torch.min))).item()
        )
        metrics["sampling/importance_sampling_ratio/mean"].append(
            self.accelerator.gather(stat(ratio, torch.mean)).nanmean().item()
        )
        metrics["sampling/importance_sampling_ratio/max"].append(
            nanmax(self.accelerator.gather(stat(ratio, torch.max))).item()
        )

    def _log_generation(self, mode, inputs, trajectories, rows, rewards_per_func, rewards, advantages, is_std_zero):
        """Reward, answer-quality and memory metrics (global), and the per-sample completion logs."""
        metrics = self._metrics[mode]
        if mode == "train":
            tokens = sum(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
            total = self.accelerator.reduce(torch.tensor(float(tokens), device=self.accelerator.device), "sum")
            self.state.num_input_tokens_seen += int(total.item())
        metrics["num_tokens"] = [self.state.num_input_tokens_seen]

        for i, name in enumerate(self.reward_func_names):
            metrics[f"rewards/{name}/mean"].append(torch.nanmean(rewards_per_func[:, i]).item())
            metrics[f"rewards/{name}/std"].append(nanstd(rewards_per_func[:, i]).item())
        weighted = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        weighted[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        metrics["reward"].append(torch.nanmean(weighted).item())
        metrics["reward_std"].append(nanstd(weighted).item())
        metrics["frac_reward_zero_std"].append(is_std_zero.float().mean().item())

        template = self.memory_config.final_prompt
        column = self.args.answers_column
        per_sample = []
        for x, t in zip(inputs, trajectories, strict=True):
            memories = [c for c in t.conversations if c.kind == "memory"]
            final = t.conversations[-1]
            golds = x.get(column)
            if isinstance(golds, str):
                golds = [golds]
            quality = None  # only for a column of gold strings; custom rewards may use it otherwise
            if isinstance(golds, list) and golds and all(isinstance(g, str) for g in golds):
                quality = (
                    strict_reward(t.answer, golds),
                    qa_metrics(extract_answer(t.answer, template), golds)["sub_em"],
                )
            per_sample.append(
                {
                    "conversations": len(t.conversations),
                    "memory_lengths": [len(c.completion_ids) for c in memories],
                    "memory_cut": [c.finish_reason == "length" for c in memories],
                    "answer_length": len(final.completion_ids),
                    "answer_cut": final.finish_reason == "length",
                    "quality": quality,
                }
            )
        gathered = gather_object(per_sample)
        memory_lengths = [n for s in gathered for n in s["memory_lengths"]]
        memory_cut = [c for s in gathered for c in s["memory_cut"]]
        answer_lengths = [s["answer_length"] for s in gathered]
        metrics["conversations/mean"].append(sum(s["conversations"] for s in gathered) / len(gathered))
        metrics["memory/mean_length"].append(sum(memory_lengths) / len(memory_lengths) if memory_lengths else 0.0)
        metrics["memory/clipped_ratio"].append(sum(memory_cut) / len(memory_cut) if memory_cut else 0.0)
        metrics["completions/mean_length"].append(sum(answer_lengths) / len(answer_lengths))
        metrics["completions/min_length"].append(float(min(answer_lengths)))
        metrics["completions/max_length"].append(float(max(answer_lengths)))
        metrics["completions/clipped_ratio"].append(sum(s["answer_cut"] for s in gathered) / len(gathered))
        quality = [s["quality"] for s in gathered if s["quality"] is not None]
        if quality:
            metrics["answers/strict_reward"].append(sum(q[0] for q in quality) / len(quality))
            metrics["answers/sub_em"].append(sum(q[1] for q in quality) / len(quality))

        self._logs["prompt"].extend(gather_object([t.question for t in trajectories]))
        self._logs["completion"].extend(gather_object([t.answer for t in trajectories]))
        for i, name in enumerate(self.reward_func_names):
            self._logs["rewards"][name].extend(rewards_per_func[:, i].tolist())
        self._logs["advantages"].extend(advantages.tolist())
        self._logs["extra"]["final_memory"].extend(
            gather_object([t.memories[-1] if t.memories else "" for t in trajectories])
        )
        self._logs["extra"]["num_conversations"].extend([s["conversations"] for s in gathered])

        # Flush what reward functions logged (log_extra / log_metric), as GRPOTrainer does.
        for column_name in sorted(set(gather_object(list(self._pending_extra_logs)))):
            values = self._pending_extra_logs.get(column_name, [None] * len(inputs))
            self._logs["extra"][column_name].extend(gather_object(values))
        self._pending_extra_logs.clear()
        for name in sorted(set(gather_object(list(self._pending_metrics)))):
            values = self._pending_metrics.get(name, [])
            local = torch.tensor([sum(values), len(values)], dtype=torch.float32, device=self.accelerator.device)
            total, count = self.accelerator.gather(local).view(-1, 2).sum(dim=0).tolist()
            metrics[name].append(total / count)
        self._pending_metrics.clear()

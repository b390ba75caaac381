"""Multi-conversation GRPO step benchmarks: micro-batch padding and training cost per loss token.

Prints a table and writes JSON (default: benchmarks/results/train_step.json). Runs on CPU.
Targets (issue "MultiConvGRPOTrainer"):
(a) padding fraction of the micro-batches <= half of that of a plain shuffle, on a generation batch shaped
    like the paper's (chunks of 5000 tokens, memories <= 1024, 16 optimizer steps per generation batch);
(b) time per loss token of a MultiConvGRPOTrainer step / that of a stock GRPOTrainer step on rows of the
    same lengths <= 1.2. Both trainers get their rows from a replay (no sampling), so the step times compare
    scoring, reference/old logps, micro-batching, forward/backward and the optimizer step. Measured on
    realistic rows (where grouping and trimming save padded compute) and on rows of one uniform shape (where
    padding is the same for both, isolating the overhead of the multi-conversation machinery).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_memagent.batching import padding_fraction, plan_micro_batches, rows_per_micro_batch  # noqa: E402
from trl_memagent.config import MultiConvGRPOConfig  # noqa: E402
from trl_memagent.rollout import Conversation, Trajectory  # noqa: E402
from trl_memagent.tiny import build_tiny_model, build_tiny_tokenizer  # noqa: E402
from trl_memagent.trainer import MultiConvGRPOTrainer  # noqa: E402

# ----------------------------------------------------------------------------------------------------------
# (a) padding


def paper_shaped_rows(rollouts: int, rng: random.Random) -> list[tuple[int, int]]:
    """(prompt, completion) lengths of the rows of `rollouts` MemAgent rollouts at the paper's sizes.

    Documents of 28-32K tokens in chunks of 5000 (6-7 chunks, the last one partial); questions of 20-80
    tokens; a memory-update template of ~130 tokens and a final one of ~70; memories drift from turn to
    turn around a per-rollout level (20-1024 tokens, cut at 1024); final answers mostly short (boxed), some
    long. These are assumptions of the benchmark, not measurements.
    """
    rows = []
    for _ in range(rollouts):
        document, question = rng.randint(28_000, 32_000), rng.randint(20, 80)
        memory = rng.randint(30, 900)
        previous = 4  # "No previous memory"
        for start in range(0, document, 5000):
            chunk = min(5000, document - start)
            memory = max(20, min(1024, int(memory + rng.gauss(0, 120))))
            rows.append((130 + question + previous + chunk, memory))
            previous = memory
        answer = rng.randint(5, 60) if rng.random() < 0.8 else rng.randint(60, 1024)
        rows.append((70 + question + previous, answer))
    return rows


def stock_padding(lengths: list[tuple[int, int]], micro_batches: int) -> float:
    """GRPOTrainer's way: every row padded to the generation batch's widest prompt and completion, then split."""
    rows = len(lengths) - len(lengths) % micro_batches  # split_tensor_dict drops the remainder
    width = max(p for p, _ in lengths) + max(c for _, c in lengths)
    return 1 - sum(p + c for p, c in lengths[:rows]) / (rows * width)


def padding_benchmark(seed: int) -> dict:
    rng = random.Random(seed)
    # The paper's 7B recipe: 128 questions x 16 rollouts per generation batch, 16 optimizer steps; here on 8
    # processes with micro-batches of about 8 rows.
    processes, steps = 8, 16
    lengths_per_process = [paper_shaped_rows(128 * 16 // processes, rng) for _ in range(processes)]
    max_rows = max(map(len, lengths_per_process))
    micro_per_step = max(1, round(max_rows / steps / 8))
    batch_rows = rows_per_micro_batch(max_rows, steps * micro_per_step)
    out = {"processes": processes, "optimizer_steps": steps, "micro_batches_per_step": micro_per_step}
    out["rows_per_micro_batch"] = batch_rows
    out["rows_per_process"] = [len(x) for x in lengths_per_process]
    results = {"grouped": [], "plain_shuffle": [], "stock_global_padding": []}
    generator = torch.Generator().manual_seed(seed)
    for lengths in lengths_per_process:
        for key, grouped in (("grouped", True), ("plain_shuffle", False)):
            plan = plan_micro_batches(lengths, steps, micro_per_step, batch_rows, grouped, generator)
            results[key].append(padding_fraction(plan, lengths))
        results["stock_global_padding"].append(stock_padding(lengths, steps * micro_per_step))
    out.update({key: statistics.mean(values) for key, values in results.items()})
    out["ratio_grouped_over_plain_shuffle"] = out["grouped"] / out["plain_shuffle"]
    return out


# ----------------------------------------------------------------------------------------------------------
# (b) time per loss token


class StepTimer(TrainerCallback):
    """CPU time of each optimizer step of this process (with one torch thread, wall time minus the waits
    caused by other processes on a shared machine)."""

    def __init__(self):
        self.seconds, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.process_time() - self._start)


def reward(completion_ids, **kwargs):
    return [(sum(ids) % 5) / 4 for ids in completion_ids]


def synthetic_trajectories(rollouts, chunks, chunk_tokens, memory_tokens, answer_tokens, vocab, rng, uniform=False):
    """Rollouts of random token ids: `chunks` memory rows then a final row each.

    Realistic shapes by default (long chunk prompts, memories of varying length, short final prompts and
    answers); with `uniform`, every row has the same prompt and completion length, so no padding differs
    between the two trainers and only their overheads are compared.
    """

    def ids(length):
        return [rng.randrange(3, vocab) for _ in range(length)]

    trajectories = []
    for r in range(rollouts):
        conversations = []
        for k in range(chunks):
            if uniform:
                prompt, completion = ids(chunk_tokens + 40), ids(memory_tokens)
            else:
                prompt = ids(chunk_tokens + 40 + rng.randint(0, memory_tokens))
                completion = ids(rng.randint(memory_tokens // 4, memory_tokens))
            conversations.append(Conversation(prompt, completion, None, "memory", k, "length"))
        if uniform:
            prompt, completion = ids(chunk_tokens + 40), ids(memory_tokens)
        else:
            prompt, completion = ids(40 + rng.randint(0, memory_tokens)), ids(rng.randint(2, answer_tokens))
        conversations.append(Conversation(prompt, completion, None, "final", None, "length"))
        trajectories.append(Trajectory(f"q{r // 4}", conversations, [], ""))
    return trajectories


class ReplayMultiConv(MultiConvGRPOTrainer):
    """MultiConvGRPOTrainer whose rollout returns prepared trajectories (same rows as the stock run)."""

    replay: list[Trajectory] = []

    def _rollout(self, inputs, mode):
        return self.replay


def time_per_token(args, model_dir, tokenizer, trajectories, steps) -> dict:
    num_generations = 4
    rows = [c for t in trajectories for c in t.conversations]
    loss_tokens = sum(len(c.completion_ids) for c in rows)
    questions = len(trajectories) // num_generations
    common = dict(
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        num_generations=num_generations,
        gradient_accumulation_steps=args.grad_accum,
        max_steps=steps,
        learning_rate=1e-5,
        beta=1e-3,
        loss_type="dapo",
        scale_rewards="none",
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        shuffle_dataset=False,
        disable_tqdm=True,
    )
    with tempfile.TemporaryDirectory() as out:
        # MultiConvGRPOTrainer: len(trajectories) rollouts per generation batch.
        ReplayMultiConv.replay = trajectories
        mc_args = MultiConvGRPOConfig(
            output_dir=out,
            per_device_train_batch_size=len(trajectories) // args.grad_accum,
            chunk_tokens=args.chunk_tokens,
            memory_tokens=args.memory_tokens,
            max_completion_length=args.answer_tokens,
            **common,
        )
        questions_ds = Dataset.from_dict(
            {"prompt": [f"q{i}" for i in range(questions)], "context": ["doc"] * questions}
        )
        mc = ReplayMultiConv(
            model_dir, reward_funcs=reward, args=mc_args, train_dataset=questions_ds, processing_class=tokenizer
        )

        # Stock GRPOTrainer: the same rows, one row per prompt, served by `rollout_func`.
        def rollout_func(prompts, trainer):
            seen: dict[str, int] = {}
            picked = []
            for prompt in prompts:  # the k-th copy of prompt r{i} serves row i + k
                seen[prompt] = seen.get(prompt, -1) + 1
                picked.append(rows[int(prompt[1:]) + seen[prompt]])
            return {
                "prompt_ids": [c.prompt_ids for c in picked],
                "completion_ids": [c.completion_ids for c in picked],
                "logprobs": None,
            }

        stock_args = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=len(rows) // args.grad_accum,
            max_completion_length=max(len(c.completion_ids) for c in rows),
            **common,
        )
        # RepeatSampler repeats each prompt num_generations times in a row: prompt r{i} serves rows i..i+G-1.
        rows_ds = Dataset.from_dict({"prompt": [f"r{i}" for i in range(0, len(rows), num_generations)]})
        stock = GRPOTrainer(
            model_dir,
            reward_funcs=reward,
            args=stock_args,
            train_dataset=rows_ds,
            processing_class=tokenizer,
            rollout_func=rollout_func,
        )
        # Alternate the runs (A B B A ...) so that load from other processes on the machine hits both alike.
        timings = {"multiconv": [], "stock": []}
        for repeat in range(args.repeats):
            pair = [("multiconv", mc), ("stock", stock)]
            for name, trainer in pair if repeat % 2 == 0 else pair[::-1]:
                timer = StepTimer()
                trainer.add_callback(timer)
                trainer.train()
                trainer.remove_callback(timer)
                timings[name] += timer.seconds[1:]  # the first step of a run warms up
    out = {
        "rows": len(rows),
        "loss_tokens_per_step": loss_tokens,
        "multiconv_step_cpu_s": statistics.median(timings["multiconv"]),
        "stock_step_cpu_s": statistics.median(timings["stock"]),
    }
    out["multiconv_s_per_loss_token"] = out["multiconv_step_cpu_s"] / loss_tokens
    out["stock_s_per_loss_token"] = out["stock_step_cpu_s"] / loss_tokens
    out["ratio"] = out["multiconv_s_per_loss_token"] / out["stock_s_per_loss_token"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="benchmarks/results/train_step.json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=4, help="training steps per run (the first is not timed)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per trainer, alternating with the other")
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--chunk-tokens", type=int, default=192)
    parser.add_argument("--memory-tokens", type=int, default=64)
    parser.add_argument("--answer-tokens", type=int, default=32)
    parser.add_argument("--grad-accum", type=int, default=4)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: best for tiny models)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    padding = padding_benchmark(args.seed)
    print("(a) micro-batch padding, paper-shaped generation batch (128 questions x 16 rollouts, 8 processes)")
    print(
        f"    rows per process {min(padding['rows_per_process'])}-{max(padding['rows_per_process'])}, "
        f"{padding['optimizer_steps']} optimizer steps x {padding['micro_batches_per_step']} micro-batches "
        f"of {padding['rows_per_micro_batch']} rows"
    )
    for key in ("stock_global_padding", "plain_shuffle", "grouped"):
        print(f"    {key:<22} {padding[key]:.3f}")
    print(f"    grouped / plain shuffle = {padding['ratio_grouped_over_plain_shuffle']:.2f} (target <= 0.5)")

    tokenizer = build_tiny_tokenizer()
    with tempfile.TemporaryDirectory() as model_dir:
        build_tiny_model(tokenizer, hidden_size=args.hidden_size, num_layers=args.layers).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        cost = {}
        for shape in ("realistic", "uniform"):
            rng = random.Random(args.seed)
            trajectories = synthetic_trajectories(
                args.rollouts,
                args.chunks,
                args.chunk_tokens,
                args.memory_tokens,
                args.answer_tokens,
                len(tokenizer),
                rng,
                uniform=shape == "uniform",
            )
            cost[shape] = time_per_token(args, model_dir, tokenizer, trajectories, args.steps)
    print(
        f"(b) time per loss token, {args.rollouts} rollouts x {args.chunks + 1} conversations, "
        f"model hidden {args.hidden_size} x {args.layers} layers, CPU, {args.threads} thread(s)"
    )
    for shape, result in cost.items():
        print(
            f"    {shape:<9} rows: multi-conv step {result['multiconv_step_cpu_s']:.3f} CPU s, stock step "
            f"{result['stock_step_cpu_s']:.3f} CPU s, {result['loss_tokens_per_step']} loss tokens -> ratio "
            f"{result['ratio']:.3f} (target <= 1.2)"
        )

    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        json.dump({"padding": padding, "time_per_loss_token": cost, "args": vars(args)}, f, indent=2)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

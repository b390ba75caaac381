"""The whole micro reproduction: task, warm-start, the three conditions, evaluation at 1x/4x/16x, results.

`run_experiment` is what `scripts/micro_repro.py` runs; `ExperimentConfig.reduced()` is the CI-sized one.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch
from transformers import AutoModelForCausalLM

from ..rollout import MemoryAgentConfig
from .conditions import CONDITIONS, RL_CONDITIONS, RLConfig, train_rl
from .evaluation import evaluate_lengths
from .task import TaskConfig, TaskGenerator, build_task_tokenizer
from .warmstart import WarmStartConfig, warm_start


@dataclass
class ExperimentConfig:
    """Everything the experiment depends on; the defaults are the full run (~25 min on 2 CPU cores)."""

    task: TaskConfig = field(default_factory=TaskConfig, metadata={"help": "The synthetic task."})
    train_chunks: int = field(default=4, metadata={"help": "Chunks per training document (the length L)."})
    eval_multipliers: tuple[int, ...] = field(
        default=(1, 4, 16), metadata={"help": "Evaluation lengths, as multiples of train_chunks."}
    )
    eval_samples: int = field(default=128, metadata={"help": "Questions per evaluation length."})
    eval_sampling: tuple[tuple[float, float], ...] = field(
        default=((0.7, 0.95), (1.0, 1.0)),
        metadata={
            "help": "(temperature, top_p) of each evaluation: the first is the headline (the paper's final "
            "evaluation, T=0.7 top_p=0.95); T=1.0 is the rollouts' own sampling, where accuracy is the mean reward."
        },
    )
    memory_tokens: int = field(default=12, metadata={"help": "Memory budget of the agent, in tokens."})
    answer_tokens: int = field(default=8, metadata={"help": "Final-answer budget, in tokens."})
    vocab_size: int = field(default=768, metadata={"help": "BPE vocabulary of the task's tokenizer."})
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig, metadata={"help": "The SFT warm-start."})
    rl: RLConfig = field(default_factory=RLConfig, metadata={"help": "The RL budget (same for both conditions)."})
    seeds: tuple[int, ...] = field(default=(0, 1, 2), metadata={"help": "RL seeds, each run for both RL conditions."})
    threads: int = field(default=2, metadata={"help": "torch CPU threads."})
    data_seed: int = field(default=0, metadata={"help": "Seed of the warm-start and of the data draws."})

    @classmethod
    def reduced(cls) -> ExperimentConfig:
        """The CI version: the same task, teacher and RL settings with a smaller warm-start, fewer RL steps and
        one evaluation, at the training length with the rollouts' sampling (accuracy = mean reward)."""
        return cls(
            eval_multipliers=(1,),
            eval_samples=256,
            eval_sampling=((1.0, 1.0),),
            warm_start=WarmStartConfig(num_samples=1000, max_steps=160),
            rl=RLConfig(max_steps=20, num_questions=512),
            seeds=(0,),
        )

    def agent_config(self) -> MemoryAgentConfig:
        return MemoryAgentConfig(
            chunk_tokens=self.task.chunk_tokens, memory_tokens=self.memory_tokens, answer_tokens=self.answer_tokens
        )


def sampling_label(temperature: float, top_p: float) -> str:
    return f"T={temperature:g}" + (f", top_p={top_p:g}" if top_p < 1.0 else "")


def _summary(values: list[float]) -> dict:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": values,
    }


def reward_curve(log_history: list[dict]) -> list[float]:
    """Mean training reward of each RL step (the strict verifier on the step's rollouts)."""
    return [entry["reward"] for entry in log_history if "reward" in entry]


def run_experiment(
    config: ExperimentConfig,
    output_dir: str,
    conditions: tuple[str, ...] = CONDITIONS,
    progress=print,
) -> dict:
    """Run the experiment; returns (and writes to `output_dir/results.json`) every figure it measured.

    The warm-start is trained once; each RL condition restarts from it for every seed, with the same questions,
    order and budget. Every model is evaluated on the same questions with the same sampling seeds.
    """
    unknown = set(conditions) - set(CONDITIONS)
    if unknown:
        raise ValueError(f"unknown conditions {sorted(unknown)}; choose from {CONDITIONS}")
    torch.set_num_threads(config.threads)
    # The harness resumes from the records it finds; records of an earlier run's models must not be reused.
    shutil.rmtree(os.path.join(output_dir, "eval"), ignore_errors=True)
    os.makedirs(output_dir, exist_ok=True)
    start = time.perf_counter()
    walls: dict[str, float] = {}
    tokenizer = build_task_tokenizer(config.task, config.vocab_size)
    generator = TaskGenerator(tokenizer, config.task)
    lengths = [m * config.train_chunks for m in config.eval_multipliers]
    eval_rows = {
        n: generator.dataset_rows(config.eval_samples, n, seed=10_000 + config.data_seed + n, prefix=f"eval{n}")
        for n in lengths
    }
    train_rows = generator.dataset_rows(
        config.rl.num_questions, config.train_chunks, seed=20_000 + config.data_seed, prefix="train"
    )
    agent = config.agent_config()

    def timed(name, fn, *args):
        begin = time.perf_counter()
        value = fn(*args)
        walls[name] = round(time.perf_counter() - begin, 1)
        progress(f"[micro_repro] {name}: {walls[name]:.0f} s")
        return value

    def evaluate_model(model, name) -> dict[str, dict]:
        out = {}
        for temperature, top_p in config.eval_sampling:
            label = sampling_label(temperature, top_p)
            directory = os.path.join(output_dir, "eval", label.replace(", ", "_").replace("=", ""), name)
            out[label] = evaluate_lengths(
                model, tokenizer, eval_rows, agent, directory, name, temperature=temperature, top_p=top_p
            )
        return out

    warm_dir = os.path.join(output_dir, "warmstart")
    model, sft_logs = timed(
        "warm_start",
        warm_start,
        tokenizer,
        generator,
        config.warm_start,
        config.train_chunks,
        warm_dir,
        config.data_seed,
    )
    runs: dict[str, dict[str, dict]] = {}  # condition -> seed -> sampling -> length -> metrics
    if "none" in conditions:
        runs["none"] = {"-": timed("eval/none", evaluate_model, model, "none")}
    curves: dict[str, dict[str, list[float]]] = {}
    for condition in [c for c in RL_CONDITIONS if c in conditions]:
        runs[condition], curves[condition] = {}, {}
        for seed in config.seeds:
            name = f"{condition}-seed{seed}"
            policy = AutoModelForCausalLM.from_pretrained(warm_dir)
            logs = timed(
                f"rl/{name}",
                train_rl,
                condition,
                policy,
                tokenizer,
                train_rows,
                config.rl,
                os.path.join(output_dir, "rl", name),
                seed,
                agent,
            )
            curves[condition][str(seed)] = reward_curve(logs)
            runs[condition][str(seed)] = timed(f"eval/{name}", evaluate_model, policy, name)

    table = {
        sampling_label(*sampling): {
            condition: {
                str(n): {
                    metric: _summary([by_seed[s][sampling_label(*sampling)][n][metric] for s in by_seed])
                    for metric in ("accuracy", "memory_kept")
                }
                for n in lengths
            }
            for condition, by_seed in runs.items()
        }
        for sampling in config.eval_sampling
    }
    walls["total"] = round(time.perf_counter() - start, 1)
    results = {
        "config": asdict(config),
        "lengths": lengths,
        "table": table,
        "reward_curves": curves,
        "sft_loss": [(e["step"], e["loss"]) for e in sft_logs if "loss" in e],
        "wall_seconds": walls,
        "machine": {"torch_threads": config.threads, "cpus": os.cpu_count(), "python": platform.python_version()},
    }
    with open(os.path.join(output_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    return results

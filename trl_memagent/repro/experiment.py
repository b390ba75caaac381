"""The whole micro reproduction: task, warm-start, the three conditions, evaluation at 1x/4x/16x, results.

`run_experiment` is what `scripts/micro_repro.py` runs; `ExperimentConfig.reduced()` is the CI-sized one.
"""

from __future__ import annotations

import json
import os
import platform
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
    """Everything the experiment depends on; the defaults are the full run (~30 min on 2 CPU cores)."""

    task: TaskConfig = field(default_factory=TaskConfig, metadata={"help": "The synthetic task."})
    train_chunks: int = field(default=4, metadata={"help": "Chunks per training document (the length L)."})
    eval_multipliers: tuple[int, ...] = field(
        default=(1, 4, 16), metadata={"help": "Evaluation lengths, as multiples of train_chunks."}
    )
    eval_samples: int = field(default=128, metadata={"help": "Questions per evaluation length."})
    memory_tokens: int = field(default=12, metadata={"help": "Memory budget of the agent, in tokens."})
    answer_tokens: int = field(default=8, metadata={"help": "Final-answer budget, in tokens."})
    vocab_size: int = field(default=768, metadata={"help": "Vocabulary of the task's tokenizer."})
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig, metadata={"help": "The SFT warm-start."})
    rl: RLConfig = field(default_factory=RLConfig, metadata={"help": "The RL budget (same for both conditions)."})
    seeds: tuple[int, ...] = field(default=(0, 1), metadata={"help": "RL seeds, each run for both RL conditions."})
    eval_temperature: float = field(default=0.7, metadata={"help": "Evaluation sampling temperature (paper)."})
    eval_top_p: float = field(default=0.95, metadata={"help": "Evaluation nucleus (paper)."})
    threads: int = field(default=2, metadata={"help": "torch CPU threads."})
    data_seed: int = field(default=0, metadata={"help": "Seed of the tokenizer-independent data draws."})

    @classmethod
    def reduced(cls) -> ExperimentConfig:
        """The CI version: a smaller warm-start and a short (b) run on the same task."""
        return cls(
            eval_samples=32,
            eval_multipliers=(1,),
            warm_start=WarmStartConfig(num_samples=800, max_steps=300),
            rl=RLConfig(max_steps=12, questions_per_step=4, num_generations=8, num_questions=256),
            seeds=(0,),
        )

    def agent_config(self) -> MemoryAgentConfig:
        return MemoryAgentConfig(
            chunk_tokens=self.task.chunk_tokens, memory_tokens=self.memory_tokens, answer_tokens=self.answer_tokens
        )


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
    """Run the experiment; returns (and writes to `output_dir/results.json`) every figure it measured."""
    torch.set_num_threads(config.threads)
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

    def timed(name, fn, *args, **kwargs):
        begin = time.perf_counter()
        value = fn(*args, **kwargs)
        walls[name] = round(time.perf_counter() - begin, 1)
        progress(f"[micro_repro] {name}: {walls[name]:.0f} s")
        return value

    def evaluate_model(model, name):
        return timed(
            f"eval/{name}",
            evaluate_lengths,
            model,
            tokenizer,
            eval_rows,
            agent,
            os.path.join(output_dir, "eval", name),
            name,
            temperature=config.eval_temperature,
            top_p=config.eval_top_p,
        )

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
    evaluations: dict[str, dict[str, dict]] = {}
    if "none" in conditions:
        evaluations["none"] = {"-": evaluate_model(model, "none")}
    curves: dict[str, dict[str, list[float]]] = {}
    for condition in [c for c in RL_CONDITIONS if c in conditions]:
        evaluations[condition], curves[condition] = {}, {}
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
                config.task.chunk_tokens,
                config.memory_tokens,
                config.answer_tokens,
            )
            curves[condition][str(seed)] = reward_curve(logs)
            evaluations[condition][str(seed)] = evaluate_model(policy, name)

    table = {
        condition: {
            str(n): {metric: _summary([runs[s][n][metric] for s in runs]) for metric in ("accuracy", "memory_kept")}
            for n in lengths
        }
        for condition, runs in evaluations.items()
    }
    walls["total"] = round(time.perf_counter() - start, 1)
    results = {
        "config": asdict(config),
        "lengths": lengths,
        "table": table,
        "reward_curves": curves,
        "sft_loss": [(e["step"], e["loss"]) for e in sft_logs if "loss" in e],
        "wall_seconds": walls,
        "machine": {"threads": config.threads, "cpus": os.cpu_count(), "python": platform.python_version()},
    }
    with open(os.path.join(output_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    return results

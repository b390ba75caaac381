"""Accuracy of one model at several document lengths, with the project's evaluation harness.

Sampling defaults to the paper's final evaluation (T=0.7, top_p=0.95) and is seeded per group by the harness,
so a rerun repeats the same samples. Accuracy is the strict training verifier (`strict_reward`: the last
`\\boxed{}` equals the code) averaged over the samples of a length, i.e. the mean reward; the harness's own
lenient metrics (`sub_em`, which accepts any answer contained in the gold or containing it) stay in its files.
"""

from __future__ import annotations

import os
import re

from ..backends import TransformersBackend
from ..evaluation import EvalConfig, evaluate
from ..rewards import strict_reward
from ..rollout import MemoryAgentConfig


def memory_holds_code(record: dict) -> bool:
    """Whether the last memory of a harness record holds the gold code and no other digit.

    RL may reword the memory (e.g. copy the key sloppily, which the reward does not check), so the memory is
    judged by what the final answer needs from it: the code.
    """
    memories = record.get("memories") or [""]
    return re.findall(r"\d", memories[-1]) == [record["gold"][0]]


def evaluate_lengths(
    model,
    tokenizer,
    rows_by_length: dict[int, list[dict]],
    agent_config: MemoryAgentConfig,
    output_dir: str,
    name: str,
    seed: int = 0,
    batch_size: int = 64,
    temperature: float = 0.7,
    top_p: float = 0.95,
) -> dict[int, dict[str, float]]:
    """Per number of chunks: `accuracy` (%) and `memory_kept` (% of final memories that hold the code).

    The harness writes its records and summaries under `output_dir/<chunks>`.
    """
    model.eval()
    backend = TransformersBackend(model, tokenizer, temperature=temperature, top_p=top_p, do_sample=temperature > 0)
    config = EvalConfig(
        name=name, batch_size=batch_size, seed=seed, memory_trace="last", metric="qa", plot=False, progress=False
    )
    results = {}
    for num_chunks, rows in rows_by_length.items():
        directory = os.path.join(output_dir, str(num_chunks))
        result = evaluate(backend, tokenizer, {f"chunks{num_chunks}": rows}, directory, config, agent_config)
        if len(result.records) != len(rows) or any(r["status"] != "ok" for r in result.records):
            raise RuntimeError(f"{name}: evaluation at {num_chunks} chunks did not finish every sample ({output_dir})")
        scores = [strict_reward(r["raw_answer"], r["gold"]) for r in result.records]
        kept = [memory_holds_code(r) for r in result.records]
        results[num_chunks] = {
            "accuracy": 100.0 * sum(scores) / len(scores),
            "memory_kept": 100.0 * sum(kept) / len(kept),
        }
    return results

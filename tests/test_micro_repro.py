"""The micro reproduction of MemAgent's RL ablation: task layout, teacher trajectories, the final-only trainer,
and the reduced experiment (condition (b) must raise its reward by more than its seed-to-seed spread)."""

from __future__ import annotations

import random

import pytest
import torch
from datasets import Dataset

from trl_memagent.data.custom import validate_dataset
from trl_memagent.repro.conditions import FinalOnlyGRPOTrainer, RLConfig, grpo_config
from trl_memagent.repro.task import KEYS, TaskConfig, TaskGenerator, build_task_tokenizer, fact_text
from trl_memagent.repro.teacher import TeacherConfig, teacher_examples
from trl_memagent.rollout import MemoryAgent, MemoryAgentConfig
from trl_memagent.templates import INITIAL_MEMORY, PromptBuilder


@pytest.fixture(scope="module")
def task():
    config = TaskConfig()
    tokenizer = build_task_tokenizer(config)
    return config, tokenizer, TaskGenerator(tokenizer, config)


def test_documents_split_into_the_generated_chunks(task):
    config, tokenizer, generator = task
    rng = random.Random(0)
    for num_chunks in (1, 4, 16):
        for _ in range(20):
            sample = generator.sample(rng, num_chunks)
            generator.check_layout(sample)  # the agent reads exactly the chunks the generator laid out
            ids = tokenizer.encode(sample.document, add_special_tokens=False)
            assert len(ids) == num_chunks * config.chunk_tokens
            target = sample.chunks[sample.target_chunk]
            assert fact_text(sample.key, sample.value)[:-1] in target
            for index, chunk in enumerate(sample.chunks):
                assert chunk.count("The code of") == int(index == sample.target_chunk)
                assert chunk.count("The color of") == int(index in sample.distractors)
                if index in sample.distractors:
                    assert fact_text(*sample.distractors[index], "color")[:-1] in chunk
    rows = generator.dataset_rows(8, 4, seed=1, prefix="t")
    validate_dataset(rows)
    assert rows == generator.dataset_rows(8, 4, seed=1, prefix="t")  # reproducible
    assert {row["answers"][0] for row in generator.dataset_rows(200, 2, seed=2, prefix="t")} == set("0123456789")


def test_tokenizer_keeps_codes_as_digits_and_instructions_as_single_tokens(task):
    config, tokenizer, _ = task
    for key in KEYS[: config.num_keys]:
        assert len(tokenizer.encode(" " + key, add_special_tokens=False)) == 1
    boxed_ids = tokenizer.encode("\\boxed{7}", add_special_tokens=False)
    assert tokenizer.convert_ids_to_tokens(boxed_ids)[-2] == "7"
    memory_prompt = PromptBuilder(tokenizer).memory_prompt([], [], [])
    assert len(memory_prompt) < 70  # the 60-word instruction is one token


def test_teacher_trajectories_are_the_agent_conversations(task):
    config, tokenizer, generator = task
    prompts = PromptBuilder(tokenizer)
    sample = generator.sample(random.Random(3), 4)
    clean = teacher_examples(sample, prompts, random.Random(0), TeacherConfig(forget_rate=0.0))
    assert [e.kind for e in clean] == ["memory"] * 4 + ["final"]
    fact_ids = tokenizer.encode(fact_text(sample.key, sample.value), add_special_tokens=False)
    eos = tokenizer.eos_token_id
    for index, example in enumerate(clean[:4]):
        expected = fact_ids if index >= sample.target_chunk else prompts.initial_memory_ids
        assert example.completion_ids == expected + [eos]
    assert tokenizer.decode(clean[-1].completion_ids, skip_special_tokens=True) == f"\\boxed{{{sample.value}}}"

    # The prompts are exactly those MemoryAgent builds when it replays the teacher's memories.
    class Replay:
        def __init__(self, completions):
            self.completions, self.prompts = iter(completions), []

        def generate(self, prompt_ids, max_tokens):
            from trl_memagent.backends import Generation

            self.prompts += prompt_ids
            return [Generation(next(self.completions), None, "stop") for _ in prompt_ids]

    replay = Replay([e.completion_ids for e in clean])
    agent = MemoryAgent(replay, tokenizer, MemoryAgentConfig(chunk_tokens=config.chunk_tokens))
    (trajectory,) = agent.run([sample.question], [sample.document])
    assert replay.prompts == [e.prompt_ids for e in clean]
    assert trajectory.memories[-1] == fact_text(sample.key, sample.value)

    # forget_rate=1: every chunk after the target drops the memory, and no final answer is shown.
    late = next(s for s in (generator.sample(random.Random(i), 4) for i in range(50)) if s.target_chunk < 3)
    noisy = teacher_examples(late, prompts, random.Random(0), TeacherConfig(forget_rate=1.0))
    assert len(noisy) == 4 and noisy[-1].kind == "memory"
    assert tokenizer.decode(noisy[-1].completion_ids, skip_special_tokens=True) == INITIAL_MEMORY


def test_final_only_trainer_trains_only_final_answers(task, tmp_path):
    config, tokenizer, generator = task
    from trl_memagent.repro.warmstart import WarmStartConfig, tiny_qwen2

    model = tiny_qwen2(tokenizer, WarmStartConfig(hidden_size=32), seed=0)
    rows = generator.dataset_rows(4, 3, seed=0, prefix="t")
    dataset = Dataset.from_list([{k: r[k] for k in ("prompt", "context", "answers")} for r in rows])
    rl = RLConfig(max_steps=1, questions_per_step=2, num_generations=2, micro_batches=2, learning_rate=0.1)
    agent = MemoryAgentConfig(chunk_tokens=config.chunk_tokens, memory_tokens=6, answer_tokens=6)
    args = grpo_config(rl, str(tmp_path), seed=0, agent=agent)

    def reward(completions, completion_ids, **kwargs):  # varies within groups, so advantages are non-zero
        return [float(len(ids) % 2) for ids in completion_ids]

    class Recording(FinalOnlyGRPOTrainer):
        def _rollout(self, inputs, mode):
            self.trajectories = super()._rollout(inputs, mode)
            return self.trajectories

    trainer = Recording(model, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    finals = sorted(tuple(t.conversations[-1].prompt_ids) for t in trainer.trajectories)
    trained = []
    for batch in trainer._buffered_inputs:
        for i in range(batch["prompt_ids"].size(0)):
            if batch["tool_mask"][i].sum() > 0:
                trained.append(tuple(batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()))
    assert len(trainer.trajectories[0].conversations) == 4  # three memory updates and the final answer
    assert sorted(trained) == finals
    assert torch.isfinite(torch.tensor(trainer.state.log_history[0]["loss"]))


# Seed-to-seed spread of the reduced run, measured with `scripts/micro_repro.py --reduced --seeds 0 1 2 3 4`
# (benchmarks/results/micro_repro_reduced.json): after RL the mean reward is 81.2 ± 1.3 points (std over the five
# RL seeds, same warm-start), against 59.4 before.
SEED_SPREAD_POINTS = 1.3


def test_reduced_experiment_multi_conv_rl_raises_the_reward(tmp_path):
    """Condition (b) from a fresh warm-start, fixed seeds: the mean reward (strict verifier, rollout sampling T=1,
    256 fixed questions at the training length) must rise by far more than sampling noise and seed spread."""
    from trl_memagent.repro.experiment import ExperimentConfig, run_experiment

    config = ExperimentConfig.reduced()
    results = run_experiment(config, str(tmp_path), conditions=("none", "multi_conv"))
    (table,) = results["table"].values()
    length = str(config.train_chunks)
    before = table["none"][length]["accuracy"]["mean"]
    after = table["multi_conv"][length]["accuracy"]["mean"]
    n = config.eval_samples

    def standard_error(percent):
        return (percent * (100 - percent) / n) ** 0.5

    # Sampling noise of both means (binomial) and the RL seed-to-seed spread: about 4 points.
    noise = (standard_error(before) ** 2 + standard_error(after) ** 2 + SEED_SPREAD_POINTS**2) ** 0.5
    print(f"mean reward {before:.1f} -> {after:.1f} points (noise {noise:.1f}); walls {results['wall_seconds']}")
    assert 20 < before < 85, "the warm-start should have learned the task, imperfectly"
    assert after - before > 3 * noise
    kept_before = table["none"][length]["memory_kept"]["mean"]
    kept_after = table["multi_conv"][length]["memory_kept"]["mean"]
    assert kept_after - kept_before > 3 * noise, "the gain should come from the memory keeping the code"
    (curve,) = results["reward_curves"]["multi_conv"].values()
    assert len(curve) == config.rl.max_steps
    assert sum(curve[-3:]) / 3 > sum(curve[:3]) / 3

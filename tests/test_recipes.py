"""Every recipe parses and builds its configs (no model download), the paper's recipes carry the released
hyperparameters, accelerate configs load, and mistyped keys or wrong types fail with clear errors."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from accelerate.commands.config.config_args import load_config_from_file
from trl import get_peft_config, get_quantization_config

from trl_memagent.cli import main as cli_main
from trl_memagent.config import MultiConvGRPOConfig
from trl_memagent.train_cli import RecipeError, load_reward_funcs, main, parse_args

ROOT = os.path.join(os.path.dirname(__file__), "..")
RECIPES = sorted(glob.glob(os.path.join(ROOT, "recipes", "*.yaml")))
ACCELERATE = sorted(glob.glob(os.path.join(ROOT, "recipes", "accelerate", "*.yaml")))
PAPER = json.load(open(os.path.join(ROOT, "trl_memagent", "resources", "paper_results.json")))["training"]


def header(path: str) -> str:
    """The recipe's leading comment block."""
    lines = []
    for line in open(path):
        if not line.startswith("#"):
            break
        lines.append(line)
    return "".join(lines)


def parse_recipe(path: str, tmp_path, *extra: str):
    recipe = yaml.safe_load(open(path))
    # TrainingArguments refuses bf16 on a machine without a bf16 GPU, so GPU recipes are built here with
    # use_cpu=True; nothing else about them changes.
    cpu = ["--use_cpu", "true"] if recipe.get("bf16") else []
    return parse_args(["--config", path, "--output_dir", str(tmp_path), *cpu, *extra])


def accelerate_config_of(path: str):
    """The accelerate config a recipe's launch line names (None when it runs without accelerate)."""
    match = re.search(r"--config_file (\S+)", header(path))
    return load_config_from_file(os.path.join(ROOT, match.group(1))) if match else None


def test_recipes_exist():
    names = {os.path.basename(p) for p in RECIPES}
    assert {
        "memagent-qwen2.5-7b-instruct.yaml",
        "memagent-qwen2.5-14b-instruct.yaml",
        "lora-qwen2.5-7b-instruct-1node.yaml",
        "qlora-qwen2.5-7b-instruct-1gpu.yaml",
        "tiny-cpu.yaml",
    } <= names


@pytest.mark.parametrize("path", RECIPES, ids=os.path.basename)
def test_every_recipe_parses_and_builds_its_configs(path, tmp_path):
    text = header(path).lower()
    assert "hardware" in text and "memory" in text and "time" in text, (
        f"{path}: header must give hardware, memory, time"
    )
    script_args, training_args, model_args = parse_recipe(path, tmp_path)
    assert isinstance(training_args, MultiConvGRPOConfig)
    memory = training_args.memory_agent_config()
    assert memory.chunk_tokens > 0 and memory.answer_tokens == training_args.max_completion_length
    assert all(callable(f) for f in load_reward_funcs(script_args.reward_funcs))
    peft = get_peft_config(model_args)
    assert (peft is not None) == model_args.use_peft
    quantization = get_quantization_config(model_args)
    assert (quantization is not None) == (model_args.load_in_4bit or model_args.load_in_8bit)
    cluster = accelerate_config_of(path)
    processes = cluster.num_processes if cluster else 1
    # Every generation batch holds whole groups and splits into whole optimizer steps.
    rollouts = training_args.per_device_train_batch_size * processes * training_args.steps_per_generation
    assert rollouts % training_args.num_generations == 0
    assert training_args.steps_per_generation % training_args.gradient_accumulation_steps == 0


@pytest.mark.parametrize("path", ACCELERATE, ids=os.path.basename)
def test_accelerate_configs_load(path):
    config = load_config_from_file(path)
    assert config.num_processes >= config.num_machines >= 1
    assert config.mixed_precision == "bf16"


@pytest.mark.parametrize("size", ["7B", "14B"])
def test_paper_recipes_use_the_released_hyperparameters(size, tmp_path):
    path = os.path.join(ROOT, "recipes", f"memagent-qwen2.5-{size.lower()}-instruct.yaml")
    script_args, args, model_args = parse_recipe(path, tmp_path)
    cluster = accelerate_config_of(path)
    assert model_args.model_name_or_path == f"Qwen/Qwen2.5-{size}-Instruct" and not model_args.use_peft
    assert cluster.num_machines > 1 and (
        cluster.distributed_type == "FSDP" or cluster.deepspeed_config.get("zero_stage") == 3
    )
    rollouts = args.per_device_train_batch_size * cluster.num_processes * args.steps_per_generation
    optimizer_steps = args.steps_per_generation // args.gradient_accumulation_steps
    assert args.num_generations == PAPER["group_size"]
    assert rollouts == PAPER["train_batch"][size] * PAPER["group_size"]
    assert optimizer_steps == PAPER["train_batch"][size] // PAPER["mini_batch"][size] == 16
    assert args.learning_rate == PAPER["lr"] and args.warmup_steps == PAPER["warmup_steps"]
    assert args.lr_scheduler_type == "constant_with_warmup" and args.beta == PAPER["kl_coef"]
    window = PAPER["window"]
    assert (args.question_max_tokens, args.chunk_tokens) == (window["question"], window["chunk"])
    assert (args.memory_tokens, args.max_completion_length) == (window["memory"], window["output"])
    assert (args.loss_type, args.scale_rewards, args.epsilon, args.epsilon_high, args.delta) == (
        "dapo",
        "none",
        0.2,
        0.2,
        3.0,
    )
    assert (args.temperature, args.top_p, args.max_chunks, args.truncation) == (1.0, 1.0, 8, "center")
    assert args.use_vllm and args.vllm_mode == "server" and args.bf16
    assert script_args.reward_funcs == ["memagent_reward"]


def test_low_budget_recipes(tmp_path):
    lora = os.path.join(ROOT, "recipes", "lora-qwen2.5-7b-instruct-1node.yaml")
    _, args, model_args = parse_recipe(lora, tmp_path)
    cluster = accelerate_config_of(lora)
    assert model_args.use_peft and args.use_vllm and args.vllm_mode == "server"
    assert cluster.num_machines == 1 and "0" not in str(cluster.gpu_ids).split(",")  # GPU 0 is vLLM's
    qlora = os.path.join(ROOT, "recipes", "qlora-qwen2.5-7b-instruct-1gpu.yaml")
    _, args, model_args = parse_recipe(qlora, tmp_path)
    assert model_args.use_peft and model_args.load_in_4bit and accelerate_config_of(qlora) is None
    tiny = os.path.join(ROOT, "recipes", "tiny-cpu.yaml")
    script_args, args, model_args = parse_recipe(tiny, tmp_path)
    assert model_args.model_name_or_path == "tiny" and script_args.dataset_name == "synthetic"
    assert args.use_cpu and not args.bf16 and script_args.final_eval


def write_recipe(tmp_path, **changes) -> str:
    recipe = yaml.safe_load(open(os.path.join(ROOT, "recipes", "tiny-cpu.yaml")))
    recipe.update(changes)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_command_line_overrides_the_recipe(tmp_path):
    path = write_recipe(tmp_path)
    script_args, args, _ = parse_args(["--config", path, "--chunk_tokens", "64", "--final_eval_lengths", "300", "700"])
    assert args.chunk_tokens == 64 and script_args.final_eval_lengths == [300, 700]
    assert args.memory_tokens == 32 and script_args.synthetic_lengths == [256, 512]  # from the recipe
    script_args, args, _ = parse_args(["--config", path, "--final_eval=false", "--learning_rate=2e-5"])
    assert not script_args.final_eval and args.learning_rate == 2e-5


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"learning_rat": 1e-5}, r"unknown key 'learning_rat'\. Did you mean 'learning_rate'"),
        ({"chunk_token": 64}, r"unknown key 'chunk_token'\. Did you mean 'chunk_tokens'"),
        ({"num_generations": "four"}, r"num_generations: expected int or null, got str 'four'"),
        ({"learning_rate": [1e-5]}, r"learning_rate: expected float, got list"),
        ({"use_peft": "maybe"}, r"use_peft: expected bool, got str 'maybe'"),
        ({"synthetic_lengths": ["long"]}, r"synthetic_lengths: expected list of int"),
        ({"truncation": "middle"}, r"truncation: 'middle' is not one of \['center', 'error'\]"),
        ({"max_steps": None}, r"max_steps: expected int, got NoneType"),
    ],
)
def test_recipe_errors_name_the_key_and_the_file(tmp_path, capsys, changes, message):
    path = write_recipe(tmp_path, **changes)
    with pytest.raises(RecipeError, match=message) as error:
        parse_args(["--config", path])
    assert str(error.value).startswith(path)
    assert main(["--config", path]) == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--learning_rat", "1e-5"], r"command line: unknown key 'learning_rat'\. Did you mean 'learning_rate'"),
        (["--max_steps", "ten"], r"command line: max_steps: expected int, got str 'ten'"),
        (["--chunk_tokens", "64", "128"], r"--chunk_tokens takes one value"),
        (["--final_prompt", "fancy"], r"final_prompt: 'fancy' is not one of \['boxed', 'plain'\]"),
        (["--config"], r"--config needs the path"),
    ],
)
def test_command_line_errors(tmp_path, capsys, flags, message):
    path = write_recipe(tmp_path)
    argv = ["--config", path, *flags] if flags != ["--config"] else flags
    with pytest.raises(RecipeError, match=message):
        parse_args(argv)
    assert cli_main(["train", *argv]) == 2  # through the `trl-memagent` dispatcher
    assert re.search(message, capsys.readouterr().err)


def test_config_checks_surface_as_errors(tmp_path, capsys):
    # A value of the right type that the trainer's config rejects: its own message, exit status 2.
    path = write_recipe(tmp_path, steps_per_generation=3, gradient_accumulation_steps=2)
    assert main(["--config", path]) == 2
    assert "must be a multiple of gradient_accumulation_steps" in capsys.readouterr().err
    assert main(["--config", path, "--steps_per_generation", "4", "--loss_type", "grpo"]) == 2
    assert "loss_type='grpo' is not supported by multi-conversation GRPO" in capsys.readouterr().err
    path = write_recipe(tmp_path, push_merged=True)
    assert main(["--config", path]) == 2
    assert "push_merged merges a LoRA adapter: set use_peft: true" in capsys.readouterr().err


def test_module_entry_point_for_accelerate_launch(tmp_path):
    # `accelerate launch -m trl_memagent.train_cli ...` runs the module as __main__.
    path = write_recipe(tmp_path, warmup_step=3)
    run = subprocess.run(
        [sys.executable, "-m", "trl_memagent.train_cli", "--config", path], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 2
    assert "unknown key 'warmup_step'. Did you mean 'warmup_steps'" in run.stderr

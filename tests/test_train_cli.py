"""The main job end to end (`python scripts/train_tiny.py`, a subprocess as a user runs it): the checkpoint loads
with `from_pretrained`, `trl-memagent answer` runs on it, its card parses with the required metadata and its
evaluation table matches the results file; the folder a push would upload; a LoRA run saved merged."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from huggingface_hub.utils import filter_repo_objects
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_memagent.cli import main as cli_main
from trl_memagent.tiny import filler_text
from trl_memagent.train_cli import main as train_main

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
RECIPE = yaml.safe_load(open(os.path.join(ROOT, "recipes", "tiny-cpu.yaml")))
# What transformers' Trainer.push_to_hub leaves out of the upload of output_dir (trainer.py, push_to_hub).
PUSH_IGNORE = ["_*", "checkpoint-*"]


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("main-job") / "tiny-memagent"
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "scripts/train_tiny.py", "--output-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    print(f"main job: {time.perf_counter() - start:.0f}s wall")
    return out, run.stdout


def test_checkpoint_loads_with_from_pretrained(main_job):
    out, stdout = main_job
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.model_type == "qwen2" and len(tokenizer) == model.config.vocab_size
    assert all(torch.isfinite(p).all() for p in model.parameters())
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    output = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert output.shape[1] == inputs["input_ids"].shape[1] + 3
    state = json.load(open(out / f"checkpoint-{RECIPE['max_steps']}" / "trainer_state.json"))
    assert state["global_step"] == RECIPE["max_steps"]
    assert "main job done" in stdout and "=== trl-memagent answer" in stdout


def test_trl_memagent_answer_runs_on_the_checkpoint(main_job, tmp_path, capsys):
    out, _ = main_job
    document = tmp_path / "doc.txt"
    document.write_text(filler_text(300, seed=5))
    argv = ["answer", "--model", str(out), "--document", str(document), "--question", "What is the secret?"]
    argv += ["--chunk-tokens", str(RECIPE["chunk_tokens"]), "--memory-tokens", str(RECIPE["memory_tokens"])]
    argv += ["--answer-tokens", str(RECIPE["max_completion_length"]), "--show-memory"]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    tokens = len(AutoTokenizer.from_pretrained(out).encode(document.read_text(), add_special_tokens=False))
    chunks = math.ceil(tokens / RECIPE["chunk_tokens"])
    assert f"--- memory after chunk {chunks}/{chunks} ---" in printed and "--- answer ---" in printed


def test_card_metadata_settings_and_eval_table(main_job):
    out, _ = main_job
    card = ModelCard.load(out / "README.md")
    data = card.data.to_dict()
    assert {"trl", "memagent"} <= set(data["tags"]) and data["license"] == "apache-2.0"
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "text-generation"
    assert "base_model" not in data  # the tiny base is not on the Hub
    text = card.text
    assert f"reading them {RECIPE['chunk_tokens']} tokens at a time" in text
    assert f"memory of at most {RECIPE['memory_tokens']} tokens" in text
    assert f"for {RECIPE['max_steps']} optimizer steps" in text
    assert "randomly initialised tiny Qwen2" in text and "synthetic RULER samples" in text
    # The table against eval/results.jsonl, recomputed here.
    groups: dict[tuple, list[float]] = {}
    for line in open(out / "eval" / "results.jsonl"):
        record = json.loads(line)
        assert record["status"] == "ok"
        groups.setdefault((record["task"], record["length"]), []).append(record["score"])
    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("| task | length | doc tokens |")))
    rows = [line.strip("|").split("|") for line in lines[start + 2 : start + 2 + len(groups)]]
    assert len(groups) == len(RECIPE["final_eval_lengths"]) * len(RECIPE["final_eval_tasks"])
    for row in rows:
        task, length, _, n, failed, _, accuracy = (cell.strip() for cell in row[:7])
        scores = groups[(task, length)]
        assert int(n) == len(scores) == RECIPE["final_eval_samples"] and failed == "0"
        assert float(accuracy) == pytest.approx(100 * sum(scores) / len(scores), abs=0.005)
    assert "![Accuracy against document length](eval/accuracy.png)" in text
    assert (out / "eval" / "accuracy.png").stat().st_size > 10_000


def test_every_checkpoint_of_the_main_job_has_its_card(main_job):
    out, _ = main_job
    checkpoints = [name for name in os.listdir(out) if name.startswith("checkpoint-")]
    assert checkpoints
    for name in checkpoints:
        card = ModelCard.load(out / name / "README.md")
        assert "memagent" in card.data.tags and f"for {name.split('-')[1]} optimizer steps" in card.text


def test_folder_a_push_would_upload(main_job):
    out, _ = main_job
    files = sorted(
        os.path.relpath(os.path.join(root, name), out).replace(os.sep, "/")
        for root, _, names in os.walk(out)
        for name in names
    )
    uploaded = set(filter_repo_objects(files, ignore_patterns=PUSH_IGNORE))
    assert {"README.md", "config.json", "model.safetensors", "tokenizer.json", "eval/accuracy.png"} <= uploaded
    assert {"eval/summary.json", "eval/results.jsonl"} <= uploaded
    # Checkpoints, the tiny base and the demo document stay local.
    assert not any(f.startswith(("_", "checkpoint-")) for f in uploaded)
    assert any(f.startswith("checkpoint-") for f in files) and any(f.startswith("_tiny-base/") for f in files)


def test_lora_run_saved_merged(tmp_path):
    out = tmp_path / "lora"
    argv = ["--config", os.path.join(ROOT, "recipes", "tiny-cpu.yaml"), "--output_dir", str(out)]
    argv += ["--use_peft", "true", "--lora_r", "4", "--lora_target_modules", "all-linear", "--push_merged", "true"]
    argv += ["--max_steps", "2", "--final_eval", "false", "--save_strategy", "no", "--synthetic_samples", "2"]
    assert train_main(argv) == 0
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in name for name in model.state_dict())
    card = ModelCard.load(out / "README.md")
    assert "was merged into the base model" in card.text and "lora" not in card.data.tags
    assert card.data.library_name == "transformers"

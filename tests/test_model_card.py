"""Model cards: Hub metadata parsed back by huggingface_hub, the evaluation table against the results file it
came from (recomputed here from the records), re-rendering after an evaluation, cards at every checkpoint,
and LoRA adapters saved as such or merged."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict

import pytest
import torch
from configs import cpu_config
from datasets import Dataset
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_memagent.evaluation.metrics import summarize
from trl_memagent.evaluation.plots import plot_accuracy
from trl_memagent.model_card import CONTEXT_FILE, CardContext, main, write_model_card
from trl_memagent.rollout import MemoryAgentConfig
from trl_memagent.tiny import filler_text
from trl_memagent.train_cli import ADAPTER_FILES, merge_adapter_dir
from trl_memagent.trainer import MultiConvGRPOTrainer

PAPER_FILE = os.path.join(os.path.dirname(__file__), "..", "trl_memagent", "resources", "paper_results.json")
MEMORY = asdict(MemoryAgentConfig(chunk_tokens=5000, memory_tokens=1024, answer_tokens=512, max_chunks=8))


def hub_context(**overrides) -> CardContext:
    values = {
        "model_name": "MemAgent-LoRA-7B",
        "base_model": "Qwen/Qwen2.5-7B-Instruct",
        "memory": MEMORY,
        "training": {"group size (num_generations)": 16, "learning rate": 1e-6},
        "hub_model_id": "someone/MemAgent-LoRA-7B",
        "dataset": "BytedTsinghua-SIA/hotpotqa",
        "reward_funcs": ["memagent_reward"],
        "adapter": {"r": 64, "alpha": 128, "target_modules": "all-linear", "merged": False, "quantization": None},
        "global_step": 150,
    }
    return CardContext(**{**values, **overrides})


def table_rows(text: str, header_start: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header starts with `header_start`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_card_metadata_parses_with_huggingface_hub(tmp_path):
    write_model_card(str(tmp_path), hub_context())
    card = ModelCard.load(tmp_path / "README.md")
    data = card.data.to_dict()
    assert {"trl", "memagent", "lora"} <= set(data["tags"])
    assert data["base_model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert data["datasets"] == ["BytedTsinghua-SIA/hotpotqa"]
    assert data["license"] == "apache-2.0"
    assert data["library_name"] == "peft"  # an adapter repository
    assert data["pipeline_tag"] == "text-generation"
    text = card.text
    settings = dict((row[0], row[1]) for row in table_rows(text, "| setting |"))
    assert settings["chunk tokens (document tokens read per memory update)"] == "5000"
    assert settings["memory tokens (most new tokens of a memory update)"] == "1024"
    assert settings["answer tokens (most new tokens of the final answer)"] == "512"
    assert settings["max chunks per training document"] == "8 (center truncation)"
    assert settings["final-answer prompt"] == "`boxed`"
    assert "LoRA adapter** (r=64, alpha=128" in text
    # How to run it as a memory agent, with the trained sizes.
    assert "trl-memagent answer --model someone/MemAgent-LoRA-7B" in text
    assert "--chunk-tokens 5000 --memory-tokens 1024 --answer-tokens 512 --final-prompt boxed" in text
    # vLLM serves an adapter on top of its base model, under the name the backend then asks for.
    lora = "--enable-lora --max-lora-rank 64 --lora-modules memagent=someone/MemAgent-LoRA-7B"
    assert f"vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 9216 {lora}" in text
    assert 'OpenAIBackend("http://127.0.0.1:8000/v1", "memagent", tokenizer' in text
    # Citations of the paper and of TRL; no evaluation yet.
    assert "@inproceedings{yu2026memagent" in text and "@software{vonwerra2020trl" in text
    assert "No evaluation results yet" in text
    # The card's inputs are kept beside it.
    assert json.loads((tmp_path / CONTEXT_FILE).read_text())["memory"] == MEMORY


def test_local_base_and_data_stay_out_of_hub_metadata(tmp_path):
    local = tmp_path / "base"
    local.mkdir()
    context = hub_context(base_model=str(local), dataset="synthetic-local.jsonl", adapter=None, hub_model_id=None)
    write_model_card(str(tmp_path / "out"), context)
    card = ModelCard.load(tmp_path / "out" / "README.md")
    data = card.data.to_dict()
    # Full weights are served as they are: 1024 + 5000 + 2 x 1024 tokens + the chat template -> 9216.
    assert "vllm serve ./MemAgent-LoRA-7B --max-model-len 9216\n" in card.text
    # The Hub rejects base_model/datasets that are not repositories; a local path must not be written there.
    assert "base_model" not in data and "datasets" not in data
    assert data["library_name"] == "transformers" and "lora" not in data["tags"]


def crafted_records() -> list[dict]:
    """Records in the harness's format with known scores: RULER-HQA at the paper's 50/100 docs, a RULER task."""
    scores = {("ruler_hqa", "50 docs", 50): [1, 1, 0, 1], ("ruler_hqa", "100 docs", 100): [0, 1, 0, 0, 1]}
    scores[("niah_single_1", "8K", None)] = [1.0, 0.5, 0.0]
    records = []
    for (task, length, docs), values in scores.items():
        for i, score in enumerate(values):
            kind = "ruler_all" if task.startswith("niah") else "sub_em"
            records.append(
                {
                    "id": f"{task}/{length}/{i}",
                    "task": task,
                    "length": length,
                    "num_docs": docs,
                    "target_tokens": 8192 if docs is None else None,
                    "doc_tokens": 7000 * (docs or 50) // 50 + i,
                    "status": "ok",
                    "metrics": {kind: float(score)},
                    "score": float(score),
                }
            )
    records.append({**records[0], "id": "ruler_hqa/failed", "status": "failed", "metrics": {}, "score": None})
    return records


def test_eval_table_matches_the_results_file(tmp_path):
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    records = crafted_records()
    with open(eval_dir / "results.jsonl", "w") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)
    summary = summarize(records, name="run", mode="agent")
    (eval_dir / "summary.json").write_text(json.dumps(summary))
    plot_accuracy([summary], str(eval_dir / "accuracy.png"))
    write_model_card(str(tmp_path), hub_context())
    text = (tmp_path / "README.md").read_text()

    # Independent recomputation from the results file: mean score x 100 over finished records per group.
    expected = {}
    with open(eval_dir / "results.jsonl") as handle:
        for line in handle:
            r = json.loads(line)
            group = expected.setdefault((r["task"], r["length"]), {"scores": [], "failed": 0, "docs": r["num_docs"]})
            if r["status"] == "ok":
                group["scores"].append(r["score"])
            else:
                group["failed"] += 1
    paper = json.load(open(PAPER_FILE))["ruler_hqa"]
    rows = table_rows(text, "| task | length | doc tokens |")
    assert len(rows) == len(expected) == 3
    for task, length, _, n, failed, metric, accuracy, paper_7b, paper_14b in rows:
        group = expected[(task, length)]
        assert int(n) == len(group["scores"]) and int(failed) == group["failed"]
        assert float(accuracy) == pytest.approx(100 * sum(group["scores"]) / len(group["scores"]), abs=0.005)
        assert metric == ("ruler_all" if task.startswith("niah") else "sub_em")
        if task == "ruler_hqa":  # the paper's RULER-HQA numbers at the same number of documents, beside ours
            index = paper["num_docs"].index(group["docs"])
            assert float(paper_7b) == paper["v2"]["RL-MemAgent-7B"][index]
            assert float(paper_14b) == paper["v2"]["RL-MemAgent-14B"][index]
        else:
            assert paper_7b == paper_14b == "-"
    finished = [score for group in expected.values() for score in group["scores"]]
    assert (
        f"accuracy {100 * sum(finished) / len(finished):.2f}% over {len(finished)} finished samples; 1 failed" in text
    )
    assert "![Accuracy against document length](eval/accuracy.png)" in text
    assert (tmp_path / "eval" / "accuracy.png").stat().st_size > 0


def test_card_is_refreshed_after_a_later_evaluation(tmp_path):
    write_model_card(str(tmp_path), hub_context())
    assert "No evaluation results yet" in (tmp_path / "README.md").read_text()
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "summary.json").write_text(json.dumps(summarize(crafted_records(), name="later")))
    assert main([str(tmp_path)]) == 0
    text = (tmp_path / "README.md").read_text()
    assert "No evaluation results yet" not in text and "run `later`" in text
    assert "accuracy.png" not in text  # no plot was drawn, none is linked
    with pytest.raises(FileNotFoundError, match="memagent_card.json"):
        main([str(tmp_path / "eval")])


def test_every_checkpoint_carries_the_card(tiny_model_dir, tmp_path):
    dataset = Dataset.from_dict(
        {"prompt": ["Which city?", "Which river?"], "context": [filler_text(40, 1), filler_text(60, 2)]}
    )
    args = cpu_config(tmp_path, per_device_train_batch_size=2, max_steps=2, save_strategy="steps", save_steps=1)
    trainer = MultiConvGRPOTrainer(
        tiny_model_dir,
        reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
        args=args,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    trainer.model_card_license = "mit"
    trainer.train()
    for step in (1, 2):
        card = ModelCard.load(tmp_path / f"checkpoint-{step}" / "README.md")
        assert card.data.license == "mit" and "memagent" in card.data.tags
        assert f"for {step} optimizer steps" in card.text
        settings = dict((row[0], row[1]) for row in table_rows(card.text, "| setting |"))
        assert settings["chunk tokens (document tokens read per memory update)"] == "32"
        assert settings["memory tokens (most new tokens of a memory update)"] == "8"
    # The card TRL writes into output_dir at each save (and pushes) is the memory-agent card too.
    assert "## Memory settings" in (tmp_path / "README.md").read_text()


@pytest.fixture()
def lora_dirs(tiny_model_dir, tmp_path):
    """A LoRA adapter (non-zero weights) saved by peft on the tiny model, twice: to keep and to merge."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    model = get_peft_model(base, config).eval()
    adapter, merged = tmp_path / "adapter", tmp_path / "merged"
    model.save_pretrained(adapter)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(adapter)
    shutil.copytree(adapter, merged)
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    return adapter, merged, ids, expected


def test_lora_adapter_and_merged_folders(lora_dirs):
    adapter, merged, ids, expected = lora_dirs
    merge_adapter_dir(str(merged), dtype="float32")
    # The merged folder holds full weights and no adapter; the adapter folder holds only the adapter.
    assert (merged / "model.safetensors").is_file()
    assert not any((merged / name).exists() for name in ADAPTER_FILES)
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "model.safetensors").exists()
    # Both load with from_pretrained (the adapter through transformers' PEFT integration) and compute the same.
    with torch.no_grad():
        from_merged = AutoModelForCausalLM.from_pretrained(merged).eval()(input_ids=ids).logits
        from_adapter = AutoModelForCausalLM.from_pretrained(adapter).eval()(input_ids=ids).logits
    assert torch.allclose(from_merged, expected, atol=1e-5)
    assert torch.allclose(from_adapter, expected, atol=1e-5)
    assert not any("lora" in name for name in AutoModelForCausalLM.from_pretrained(merged).state_dict())

"""The no-context filter: the decision rule on hand-written answers, and resumable runs on the tiny model."""

import json

import datasets
import pytest
import torch

from trl_memagent.backends import TransformersBackend
from trl_memagent.data import FilterConfig, filter_answerable, is_answered, load_ruler_hqa
from trl_memagent.data.cli import main
from trl_memagent.data.filtering import no_context_prompt_ids


@pytest.mark.parametrize(
    ("responses", "answers", "expected"),
    [
        (["The answer is \\boxed{Paris}."], ["paris"], True),  # boxed, case-insensitive
        (["\\boxed{NewYork}"], ["New York"], True),  # the training reward ignores spaces
        (["I believe it is Paris, France."], ["Paris"], True),  # gold contained in the text
        (["No idea.", "Maybe \\boxed{Lyon}"], ["Paris"], False),
        (["\\boxed{Lyon}", "It must be PARIS"], ["Paris"], True),  # any of the samples
        (["\\boxed{the Beatles}"], ["Beatles", "The Beatles"], True),  # any of the golds
        (["\\boxed{Beatles!}"], ["The Beatles"], False),  # the reward keeps punctuation and articles
        ([], ["Paris"], False),
    ],
)
def test_decision_rule(responses, answers, expected):
    assert is_answered(responses, answers) is expected


def test_prompt_is_the_question_alone_in_the_chat_template(tiny_tokenizer):
    ids = no_context_prompt_ids(tiny_tokenizer, "Who wrote Hamlet?")
    text = tiny_tokenizer.decode(ids)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "Who wrote Hamlet?\nYour final answer in \\boxed{}.\n<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The tiny model is latency-bound: on a busy 2-core machine two threads make generate ~40x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class CountingBackend(TransformersBackend):
    """The real tiny-model backend, counting the prompts it is asked to complete."""

    prompts = 0

    def generate(self, prompt_ids, max_tokens):
        self.prompts += len(prompt_ids)
        return super().generate(prompt_ids, max_tokens)


@pytest.fixture
def backend(tiny_model, tiny_tokenizer):
    return CountingBackend(tiny_model, tiny_tokenizer, do_sample=False)


@pytest.fixture
def rows(backend, tiny_tokenizer):
    """Six questions; the gold of q2 is a piece of what the (greedy) model answers without context."""
    rows = [{"id": f"q{k}", "prompt": f"What is item {k}?", "answers": [f"zq-unlikely-{k}"]} for k in range(6)]
    (generation,) = backend.generate([no_context_prompt_ids(tiny_tokenizer, rows[2]["prompt"])], 12)
    said = tiny_tokenizer.decode(generation.completion_ids, skip_special_tokens=True)
    assert len(said) >= 4, "the tiny model answered nothing"
    rows[2]["answers"] = [said[:4]]  # a random model's text, whitespace included
    backend.prompts = 0
    return rows


def test_filter_drops_answered_and_resumes(tmp_path, backend, tiny_tokenizer, rows):
    sidecar = str(tmp_path / "decisions.jsonl")
    config = FilterConfig(num_samples=2, max_tokens=12, batch_questions=4)
    keep, report = filter_answerable(rows, backend, tiny_tokenizer, sidecar, config, progress=False)
    assert backend.prompts == 12
    with open(sidecar) as f:
        records = [json.loads(line) for line in f]
    assert [r["id"] for r in records] == [row["id"] for row in rows]
    for record, row, kept in zip(records, rows, keep):
        assert len(record["responses"]) == 2
        assert record["answered"] is is_answered(record["responses"], row["answers"]) is (not kept)
    assert keep[2] is False and sum(keep) == report.kept
    assert (report.total, report.dropped, report.resumed) == (6, 6 - report.kept, 0)

    backend.prompts = 0
    again, report = filter_answerable(rows, backend, tiny_tokenizer, sidecar, config, progress=False)
    assert backend.prompts == 0 and again == keep and report.resumed == 6

    # An interrupted run: three decisions saved, the fourth cut mid-line.
    with open(sidecar) as f:
        lines = f.readlines()
    with open(sidecar, "w") as f:
        f.writelines(lines[:3])
        f.write(lines[3][:20])
    backend.prompts = 0
    resumed, report = filter_answerable(rows, backend, tiny_tokenizer, sidecar, config, progress=False)
    assert backend.prompts == 3 * 2 and resumed == keep and report.resumed == 3
    assert "kept" in str(report) and f"dropped {report.dropped}" in str(report)


def test_cli_filter_keeps_rows_whole_and_index_only_pool_reachable(tmp_path, tiny_model_dir, capsys):
    """An index-only RULER-HQA file filtered into another directory still rebuilds its text."""
    source = tmp_path / "build"
    source.mkdir()
    pool = [f"Title {k}\nParagraph {k}." for k in range(30)]
    datasets.Dataset.from_dict({"text": pool}).to_parquet(str(source / "pool.parquet"))
    index_rows = [
        {
            "prompt": f"Question {k}?",
            "doc_indices": [k, k + 1, k + 2],
            "answers": [f"zq-unlikely-{k}"],
            "id": f"r{k}",
            "num_docs": 3,
            "gold_docs": [1],
            "pool_file": "pool.parquet",
        }
        for k in range(4)
    ]
    with open(source / "ruler_hqa_3.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in index_rows)
    output = tmp_path / "filtered" / "kept.jsonl"
    argv = ["filter", "--model", tiny_model_dir, "--input", str(source / "ruler_hqa_3.jsonl")]
    argv += ["--output", str(output), "--num-samples", "1", "--max-tokens", "6", "--temperature", "0"]
    argv += ["--max-kept", "3"]
    assert main(argv) == 0
    assert "4 questions: kept" in capsys.readouterr().out
    with open(f"{output}.decisions.jsonl") as f:
        decisions = {r["id"]: r["answered"] for r in map(json.loads, f)}
    kept_ids = [r["id"] for r in index_rows if not decisions[r["id"]]][:3]
    assert len(kept_ids) == 3
    filtered = load_ruler_hqa(str(output))
    assert filtered["id"] == kept_ids
    for row in filtered:
        k = int(row["id"][1:])
        assert row["context"] == "\n\n".join(f"Document {i}:\n{pool[k + i - 1]}" for i in (1, 2, 3))

"""Evaluation metrics, summaries, results store, baseline prompt, probe placement and cost projection.

Expected values are written out by hand, never recomputed with the code under test.
"""

import json
import os

import numpy as np
import pytest

from trl_memagent.evaluation.baseline import BaselinePrompter
from trl_memagent.evaluation.cost import cost_report
from trl_memagent.evaluation.harness import EvalConfig, evaluate, load_eval_items
from trl_memagent.evaluation.metrics import human_tokens, metric_kind, score_answer, summarize, summary_markdown
from trl_memagent.evaluation.plots import paper_curves, parse_length
from trl_memagent.evaluation.probe import build_position_probe, place_at_depths, probe_grid
from trl_memagent.evaluation.store import ResultsStore, read_records
from trl_memagent.rollout import MemoryAgentConfig

# (raw final answer, golds, kind, template, prediction, {metric: value})
SCORE_TABLE = [
    ("so \\boxed{The Eiffel Tower}", ["Eiffel Tower"], "qa", "boxed", "The Eiffel Tower",
     {"em": 1.0, "sub_em": 1.0, "f1": 1.0, "sub_em_any": 1.0}),
    # "paris france" vs "paris": gold inside the prediction; F1 = 2 * (1/2 * 1) / (1/2 + 1) = 2/3.
    ("\\boxed{Paris, France}", ["Paris"], "qa", "boxed", "Paris, France",
     {"em": 0.0, "sub_em": 1.0, "f1": 2 / 3, "sub_em_any": 1.0}),
    ("\\boxed{yes}", ["no"], "qa", "boxed", "yes", {"em": 0.0, "sub_em": 0.0, "f1": 0.0, "sub_em_any": 0.0}),
    # No \boxed{}: nothing extracted, every metric 0 even though the gold is in the text.
    ("the answer: Paris", ["Paris"], "qa", "boxed", None, {"em": 0.0, "sub_em": 0.0, "f1": 0.0, "sub_em_any": 0.0}),
    # Scored against the first gold ("1990s"); sub_em_any sees the second one ("1990") too.
    ("\\boxed{1990}", ["1990s", "1990"], "qa", "boxed", "1990",
     {"em": 0.0, "sub_em": 1.0, "f1": 0.0, "sub_em_any": 1.0}),
    # Plain template: text after the last "the answer is", trailing period stripped. F1 = 2*(1/2*1)/(3/2).
    ("Hmm. Therefore, the answer is John Smith.", ["Smith"], "qa", "plain", "John Smith",
     {"em": 0.0, "sub_em": 1.0, "f1": 2 / 3, "sub_em_any": 1.0}),
    ("\\boxed{1234567 and 7654321}", ["1234567", "7654321", "1111111"], "ruler", "boxed",
     "1234567 and 7654321", {"ruler_all": 2 / 3, "ruler_any": 1.0}),
    ("\\boxed{ABC-def}", ["abc-DEF"], "ruler", "boxed", "ABC-def", {"ruler_all": 1.0, "ruler_any": 1.0}),
    ("no box 1234567", ["1234567"], "ruler", "boxed", None, {"ruler_all": 0.0, "ruler_any": 0.0}),
]  # fmt: skip


@pytest.mark.parametrize("raw, golds, kind, template, prediction, expected", SCORE_TABLE)
def test_score_answer_matches_hand_computed_table(raw, golds, kind, template, prediction, expected):
    got_prediction, metrics, score = score_answer(raw, golds, kind, template)
    assert got_prediction == prediction
    assert metrics.keys() == expected.keys()
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value), name
    assert score == pytest.approx(expected["sub_em" if kind == "qa" else "ruler_all"])


def test_metric_kind_by_task():
    assert [metric_kind(t) for t in ("niah_single_1", "niah_multivalue", "vt", "cwe", "fwe")] == ["ruler"] * 5
    assert [metric_kind(t) for t in ("qa_1", "qa_2", "ruler_hqa", "custom", "depth_0_1")] == ["qa"] * 5


def _record(sample_id, task, length, score, status="ok", doc_tokens=100):
    record = {"id": sample_id, "task": task, "length": length, "doc_tokens": doc_tokens, "status": status}
    if status == "ok":
        record.update(score=score, metrics={"sub_em": score, "em": 0.0})
    return record


def test_summary_counts_failed_and_pending_apart_from_accuracy():
    records = [
        _record("a", "ruler_hqa", "50 docs", 1.0, doc_tokens=7000),
        _record("b", "ruler_hqa", "50 docs", 0.0, doc_tokens=7200),
        _record("c", "ruler_hqa", "50 docs", 1.0, doc_tokens=6800),
        _record("d", "ruler_hqa", "50 docs", None, status="failed", doc_tokens=7000),
        _record("e", "ruler_hqa", "100 docs", 1.0, doc_tokens=14000),
    ]
    expected = [{"id": i, "task": "ruler_hqa", "length": "50 docs"} for i in "abcd"]
    expected += [{"id": i, "task": "ruler_hqa", "length": "100 docs", "doc_tokens": 14000} for i in "ef"]
    summary = summarize(records, expected, name="m", mode="agent")
    short, long = summary["groups"]
    # 2 right of 3 finished: 66.67%; the failed one is neither right nor wrong.
    assert (short["length"], short["n"], short["failed"], short["pending"]) == ("50 docs", 3, 1, 0)
    assert short["accuracy"] == pytest.approx(66.6667, abs=1e-3)
    assert short["metrics"] == {"sub_em": pytest.approx(66.6667, abs=1e-3), "em": 0.0}
    assert short["doc_tokens"] == 7000.0  # mean of 7000, 7200, 6800, 7000
    assert (long["length"], long["n"], long["failed"], long["pending"]) == ("100 docs", 1, 0, 1)
    assert long["accuracy"] == 100.0
    assert summary["overall"] == {"n": 4, "failed": 1, "pending": 1, "accuracy": 75.0}
    table = summary_markdown(summary)
    assert "| ruler_hqa | 50 docs | 7000.00 | 3 | 1 | 0 | 66.67 | 66.67 | 0.00 |" in table
    assert "1 failed (not scored), 1 pending" in table


def test_store_survives_truncated_line_duplicates_and_retries_failed(tmp_path):
    path = str(tmp_path / "results.jsonl")
    lines = [
        json.dumps({"id": "a", "status": "ok", "score": 1.0}),
        json.dumps({"id": "b", "status": "failed", "error": "BackendError: down"}),
        json.dumps({"id": "a", "status": "ok", "score": 0.0}),  # a duplicate (e.g. a hand-merged file)
        '{"id": "c", "status": "o',  # a write cut by SIGKILL
    ]
    with open(path, "w") as handle:
        handle.write("\n".join(lines))
    store = ResultsStore(path)
    assert set(store.finished) == {"a"} and store.finished["a"]["score"] == 1.0
    assert set(store.failed) == {"b"}
    # Rewritten: the failed record (to retry), the duplicate and the partial line are gone.
    with open(path) as handle:
        assert handle.read() == lines[0] + "\n"
    store.write([{"id": "b", "status": "ok", "score": 0.0}, {"id": "c", "status": "failed", "error": "x"}])
    assert [r["id"] for r in read_records(path)] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="'a' is already finished"):
        store.write([{"id": "a", "status": "ok"}])
    reopened = ResultsStore(path)
    assert set(reopened.finished) == {"a", "b"} and set(reopened.failed) == {"c"}
    assert [r["id"] for r in read_records(path)] == ["a", "b"]


def test_store_rejects_corruption_before_the_last_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"id": "a", "status": "ok"}\nnot json\n{"id": "b", "status": "ok"}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        ResultsStore(str(path))


def test_baseline_prompt_keeps_head_and_tail_of_the_document(tiny_tokenizer):
    prompter = BaselinePrompter(tiny_tokenizer, window=300, answer_tokens=20)
    doc = np.arange(1000, dtype=np.int32) % 200 + 3  # distinct from the template's surroundings by position
    ids, kept = prompter.prompt_ids("Who?", doc)
    assert len(ids) == 300 - 20  # the prompt fills the window minus the answer budget exactly
    overhead = len(ids) - kept
    head = kept // 2
    start = ids.index(doc[0])
    assert ids[start : start + head] == doc[:head].tolist()
    assert ids[start + head : start + kept] == doc[len(doc) - (kept - head) :].tolist()
    text = tiny_tokenizer.decode(ids[:start] + ids[start + kept :])
    assert "Please read the following text" in text and "Who?" in text and "Therefore, the answer is" in text
    assert overhead > 0
    short_ids, short_kept = prompter.prompt_ids("Who?", doc[:10])
    assert short_kept == 10 and len(short_ids) == overhead + 10
    with pytest.raises(ValueError, match="no room for the document"):
        BaselinePrompter(tiny_tokenizer, window=overhead + 20, answer_tokens=20).prompt_ids("Who?", doc)


def test_place_at_depths():
    docs = [10, 11, 12, 13, 14, 15, 16, 17]  # golds 12 and 15 among 6 others
    assert place_at_depths(docs, [12, 15], [0.0, 1.0]) == [12, 10, 11, 13, 14, 16, 17, 15]
    assert place_at_depths(docs, [12, 15], [1.0, 0.0]) == [15, 10, 11, 13, 14, 16, 17, 12]
    assert place_at_depths(docs, [12, 15], [0.5, 0.5]) == [10, 11, 13, 12, 15, 14, 16, 17]
    with pytest.raises(ValueError, match="depths must lie in"):
        place_at_depths(docs, [12, 15], [0.0, 1.5])


def _hotpotqa_file(path):
    """Three questions in the original HotpotQA layout: 2 gold and 2 distractor paragraphs each."""
    rows = []
    for q in range(3):
        context = [[f"Gold{q}{g}", [f"Gold paragraph {q}{g}."]] for g in "AB"]
        context += [[f"Other{q}{k}", [f"Filler paragraph {q}{k}."]] for k in range(2)]
        rows.append(
            {
                "_id": f"q{q}",
                "question": f"Question {q}?",
                "answer": f"answer {q}",
                "context": context,
                "supporting_facts": [[f"Gold{q}A", 0], [f"Gold{q}B", 0]],
            }
        )
    path.write_text(json.dumps(rows))
    return str(path)


def test_position_probe_places_gold_documents_and_grids_accuracy(tmp_path, tiny_tokenizer, tiny_model):
    from trl_memagent.backends import TransformersBackend

    source = _hotpotqa_file(tmp_path / "hotpot.json")
    probe = build_position_probe(source, num_docs=8, depth_pairs=[(0, 1), (0.5, 0.5)], num_questions=2)
    assert len(probe) == 4
    by_id = {row["id"]: row for row in probe}
    row = by_id["q1@depth_0_1"]
    # 6 other documents; depth 0 -> document 1, depth 1 -> document 8.
    assert row["gold_docs"] == [1, 8] and row["task"] == "depth_0_1"
    assert row["context"].startswith("Document 1:\nGold1A\nGold paragraph 1A.")
    assert "Document 8:\nGold1B\nGold paragraph 1B." in row["context"]
    assert row["context"].count("Document ") == 8
    middle = by_id["q0@depth_0.5_0.5"]
    assert middle["gold_docs"] == [4, 5] and "Document 4:\nGold0A\n" in middle["context"]

    backend = TransformersBackend(tiny_model, tiny_tokenizer, do_sample=False)
    agent = MemoryAgentConfig(chunk_tokens=256, memory_tokens=4, answer_tokens=4)
    result = evaluate(backend, tiny_tokenizer, probe, str(tmp_path / "probe"), agent_config=agent, plot=False)
    assert [g["task"] for g in result.summary["groups"]] == ["depth_0.5_0.5", "depth_0_1"]
    grid = probe_grid(result.records)
    assert grid.splitlines()[0] == "| depth 1 \\ depth 2 | 0.5 | 1 |"
    assert grid.splitlines()[2] == "| 0 | - | 0.00 (n=2) |"
    assert grid.splitlines()[3] == "| 0.5 | 0.00 (n=2) | - |"


def test_cost_report_projects_per_chunk_cost_to_3_5m_tokens():
    def record(sample_id, chunks, doc_tokens, latency):
        memory_read = doc_tokens + chunks * 50  # 50 tokens of template, question and memory per turn
        return {
            "id": sample_id,
            "status": "ok",
            "num_chunks": chunks,
            "doc_tokens": doc_tokens,
            "requests": chunks + 1,
            "backend_calls": chunks + 1,
            "group_size": 1,
            "seconds": latency,
            "latency_seconds": latency,
            "tokens": {
                "read": memory_read + 60,
                "generated": chunks * 8 + 4,
                "memory_read": memory_read,
                "memory_generated": chunks * 8,
                "final_read": 60,
                "final_generated": 4,
            },
        }

    records = [record("a", 3, 250, 2.0), record("b", 1, 100, 1.0), {"id": "c", "status": "failed"}]
    report = cost_report(records, wall_seconds=3.5, new_ids={"a", "c"}, chunk_tokens=100, mode="agent")
    assert report["this_run"] == {"wall_seconds": 3.5, "finished": 1, "failed": 1}
    assert report["totals"] == {
        "samples": 2,
        "tokens_read": (250 + 3 * 50 + 60) + (100 + 1 * 50 + 60),
        "tokens_generated": (3 * 8 + 4) + (1 * 8 + 4),
        "document_tokens": 350,
        "requests": 6,
        "backend_calls": 6,
        "sample_seconds": 3.0,
    }
    per_chunk = report["per_chunk"]
    assert per_chunk["prompt_overhead_tokens"] == 50.0
    assert per_chunk["memory_tokens_generated"] == 8.0
    assert per_chunk["latency_per_turn"] == pytest.approx((2.0 / 4 + 1.0 / 2) / 2)
    assert per_chunk["wall_seconds_per_turn"] == pytest.approx(3.5 / 4)  # this run finished only "a": 4 turns
    projection = report["projection"]
    assert projection["chunks"] == 35000 and projection["requests_per_question"] == 35001
    assert projection["tokens_read_per_question"] == 3_500_000 + 35000 * 50 + 60
    assert projection["tokens_generated_per_question"] == 35000 * 8 + 4
    assert projection["latency_per_question"] == pytest.approx(35001 * 0.5)
    assert projection["wall_seconds_per_question"] == pytest.approx(35001 * 3.5 / 4)
    baseline = cost_report(records, 3.5, set(), chunk_tokens=None, mode="baseline")
    assert baseline["projection"] is None and baseline["totals"]["tokens_read"] == 670


def test_length_labels_and_paper_curves():
    assert [human_tokens(n) for n in (512, 8192, 7000, 131072, 3_500_000)] == ["512", "8K", "7K", "128K", "3.5M"]
    assert [parse_length(s) for s in ("7K", "1.75M", "3.5M")] == [7000.0, 1_750_000.0, 3_500_000.0]
    curves = paper_curves()
    assert curves["RL-MemAgent-14B"][0] == (7000.0, 80.47) and curves["RL-MemAgent-14B"][-1] == (3.5e6, 71.09)
    assert curves["QwenLong-L1-32B"][-1] == (896_000.0, 11.72)  # no result past 896K
    assert len(curves["Qwen2.5-Instruct-14B-1M"]) == 8


def test_load_eval_items_ids_labels_and_errors(tmp_path):
    rows = [
        {"prompt": "Q1?", "context": "a b c", "answers": ["x"], "num_docs": 50, "id": "h1"},
        {"prompt": [{"role": "user", "content": "Q2?"}], "context": "d e", "answers": ["y"], "num_docs": 50},
    ]
    path = tmp_path / "ruler_hqa_50.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_eval_items([str(path)])
    assert [(i.id, i.task, i.length, i.question) for i in items] == [
        ("ruler_hqa_50/h1", "ruler_hqa", "50 docs", "Q1?"),
        ("ruler_hqa_50/1", "ruler_hqa", "50 docs", "Q2?"),
    ]
    assert items[1].rows[items[1].row]["context"] == "d e"
    with pytest.raises(ValueError, match="duplicate sample id 'data/h1'"):
        load_eval_items([rows[0], rows[0]])
    with pytest.raises(ValueError, match="row 0, column 'answers'"):
        load_eval_items({"bad": [{"prompt": "Q?", "context": "c", "answers": "x"}]})
    with pytest.raises(ValueError, match="baseline_window must be positive"):
        EvalConfig(baseline_window=0)
    assert os.path.exists(path)


def test_evaluate_checkpoint_on_ruler_hqa_files(tmp_path, tiny_model_dir):
    from trl_memagent.data.hotpotqa import build_ruler_hqa
    from trl_memagent.evaluation import evaluate_checkpoint

    source = _hotpotqa_file(tmp_path / "hotpot.json")
    # The 8-document set stores pool indices only; its text is rebuilt when a sample is read.
    paths = build_ruler_hqa(source, str(tmp_path / "hqa"), num_docs=[6, 8], index_only_above=7, progress=False)
    agent = MemoryAgentConfig(chunk_tokens=128, memory_tokens=4, answer_tokens=4)
    result = evaluate_checkpoint(tiny_model_dir, paths, str(tmp_path / "out"), agent, temperature=0.0, plot=False)
    assert [(g["task"], g["length"], g["n"]) for g in result.summary["groups"]] == [
        ("ruler_hqa", "6 docs", 3),
        ("ruler_hqa", "8 docs", 3),
    ]
    assert result.summary["name"] == os.path.basename(tiny_model_dir) and result.accuracy == 0.0
    record = next(r for r in result.records if r["id"] == "ruler_hqa_8/q1")
    assert record["gold"] == ["answer 1"] and record["num_docs"] == 8 and record["extra"]["gold_docs"]
    assert record["metrics"] == {"em": 0.0, "sub_em": 0.0, "f1": 0.0, "sub_em_any": 0.0}
    # A document of 8 paragraphs, read in ceil(tokens / 128) chunks.
    assert record["num_chunks"] == -(-record["doc_tokens"] // 128) >= 2

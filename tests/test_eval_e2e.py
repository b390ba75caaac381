"""End-to-end evaluation: `transformers serve` on loopback and the local backend, a process killed by SIGKILL
and resumed, and a server that dies mid-run. Real tiny model, real files, real servers; nothing mocked.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from servers import transformers_serve

from trl_memagent.backends import OpenAIBackend, TransformersBackend
from trl_memagent.data.ruler import build_ruler_dataset
from trl_memagent.evaluation import cli as eval_cli
from trl_memagent.evaluation.harness import evaluate
from trl_memagent.evaluation.store import read_records
from trl_memagent.rollout import MemoryAgentConfig
from trl_memagent.tiny import filler_text

SMALL_AGENT = MemoryAgentConfig(chunk_tokens=96, memory_tokens=8, answer_tokens=8)
TIMING_KEYS = {"seconds", "latency_seconds"}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread in the processes these tests start too (conftest sets it for this one): a tiny model
    gains nothing from more, and on a busy 2-core machine threads waiting for each other make it 10x slower."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        yield


@pytest.fixture(scope="module")
def server(tiny_model_dir, one_thread):
    with transformers_serve(tiny_model_dir) as (base_url, _):
        yield base_url


@pytest.fixture(scope="module")
def ladder(tiny_tokenizer):
    """A small generated ladder: one needle task at two lengths, three samples each."""
    return build_ruler_dataset(tiny_tokenizer, tasks=["niah_single_1"], target_tokens=[256, 512], num_samples=3)


def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.endswith("\n")]


def _without_timing(record):
    return {k: v for k, v in record.items() if k not in TIMING_KEYS}


def test_ladder_through_server_and_local_backend_with_baseline_and_plot(
    server, ladder, tiny_model_dir, tiny_model, tiny_tokenizer, tmp_path, capsys
):
    ladder_file = str(tmp_path / "ladder.jsonl")
    ladder.to_json(ladder_file)
    served = str(tmp_path / "served")
    args = ["--model", tiny_model_dir, "--base-url", server, "--data", ladder_file, "--output-dir", served]
    args += ["--chunk-tokens", "96", "--memory-tokens", "8", "--answer-tokens", "8", "--max-concurrency", "3"]
    assert eval_cli.main(["run", *args, "--name", "tiny via transformers serve"]) == 0
    records = _lines(os.path.join(served, "results.jsonl"))
    assert sorted(r["id"] for r in records) == sorted(f"ladder/{i}" for i in ladder["id"])
    for record in records:
        assert record["status"] == "ok" and record["mode"] == "agent"
        # ceil(doc tokens / 96) memory turns, each stored in the trace, plus the final answer.
        assert record["num_chunks"] == -(-record["doc_tokens"] // 96) == len(record["memories"])
        assert record["requests"] == record["num_chunks"] + 1 == record["backend_calls"]
        assert record["gold"] and record["metrics"].keys() == {"ruler_all", "ruler_any"}
    served_summary = json.load(open(os.path.join(served, "summary.json")))
    assert [(g["length"], g["n"], g["failed"]) for g in served_summary["groups"]] == [("256", 3, 0), ("512", 3, 0)]
    cost = json.load(open(os.path.join(served, "cost.json")))
    assert cost["totals"]["requests"] == sum(r["requests"] for r in records)
    assert cost["projection"]["chunks"] == 36459  # ceil(3.5M / 96)
    assert "projected at 3,500,000 tokens" in capsys.readouterr().out

    local = str(tmp_path / "local")
    backend = TransformersBackend(tiny_model, tiny_tokenizer, do_sample=False)
    agent_result = evaluate(backend, tiny_tokenizer, ladder, local, agent_config=SMALL_AGENT, name="tiny local")
    assert agent_result.summary["overall"] == {"n": 6, "failed": 0, "pending": 0, "accuracy": 0.0}
    baseline_dir = str(tmp_path / "baseline")
    baseline = evaluate(
        backend,
        tiny_tokenizer,
        ladder,
        baseline_dir,
        agent_config=SMALL_AGENT,
        mode="baseline",
        baseline_window=600,
        name="tiny local",
    )
    by_length = {r["target_tokens"]: r for r in baseline.records}
    # A 256-token document fits in the 600-token window; a 512-token one loses its middle.
    assert by_length[256]["kept_doc_tokens"] == by_length[256]["doc_tokens"]
    assert by_length[512]["kept_doc_tokens"] < by_length[512]["doc_tokens"]
    assert all(r["tokens"]["read"] + 8 <= 600 and r["requests"] == 1 for r in baseline.records)
    for directory in (served, local, baseline_dir):
        assert os.path.getsize(os.path.join(directory, "accuracy.png")) > 10_000
        assert "| niah_single_1 | 512 |" in open(os.path.join(directory, "summary.md")).read()

    plot = str(tmp_path / "ladder.png")
    assert eval_cli.main(["plot", served, local, baseline_dir, "-o", plot, "--title", "tiny model ladder"]) == 0
    with open(plot, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert eval_cli.main(["summarize", served]) == 0
    assert "Overall: accuracy 0.00% over 6 finished samples; 0 failed" in capsys.readouterr().out


def _kill_data(path, count=12):
    rows = [
        {"id": f"s{i}", "prompt": f"Which word comes first in text {i}?", "context": filler_text(120, seed=i)}
        for i in range(count)
    ]
    for row in rows:
        row["answers"] = [row["context"].split()[0]]
    with open(path, "w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    return [row["id"] for row in rows]


def test_killed_run_resumes_without_duplicates_and_matches_an_uninterrupted_run(tiny_model_dir, tmp_path):
    data = str(tmp_path / "data.jsonl")
    ids = [f"data/{i}" for i in _kill_data(data)]

    def command(output_dir):
        # Sampled (T=1), seeded per group of ids: an interrupted run must still repeat every sample exactly.
        return ["run", "--model", tiny_model_dir, "--data", data, "--output-dir", output_dir, "--device", "cpu",
                "--chunk-tokens", "48", "--memory-tokens", "8", "--answer-tokens", "8", "--temperature", "1.0",
                "--top-p", "1.0", "--batch-size", "2", "--seed", "7", "--no-plot"]  # fmt: skip

    killed = str(tmp_path / "killed")
    results = os.path.join(killed, "results.jsonl")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    process = subprocess.Popen(
        [sys.executable, "-m", "trl_memagent.cli", "eval", *command(killed)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while len(_lines(results)) < 2:
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no result written in 120 s"
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    survived = _lines(results)
    assert 2 <= len(survived) < len(ids), "the run must be killed mid-way"

    assert eval_cli.main(command(killed)) == 0
    resumed = list(read_records(results))
    assert sorted(r["id"] for r in resumed) == sorted(ids)  # every id exactly once
    assert all(r["status"] == "ok" for r in resumed)
    # Records written before the kill are kept as they were.
    assert [_without_timing(r) for r in resumed[: len(survived)]] == [_without_timing(r) for r in survived]

    straight = str(tmp_path / "straight")
    assert eval_cli.main(command(straight)) == 0
    assert json.load(open(os.path.join(killed, "summary.json"))) == json.load(
        open(os.path.join(straight, "summary.json"))
    )
    uninterrupted = {r["id"]: _without_timing(r) for r in read_records(os.path.join(straight, "results.jsonl"))}
    assert {r["id"]: _without_timing(r) for r in resumed} == uninterrupted
    # Sampling did vary between samples (so equal records are not a trivial coincidence).
    assert len({r["raw_answer"] for r in uninterrupted.values()}) > 1


def test_server_that_dies_marks_samples_failed_and_a_rerun_completes_them(
    server, ladder, tiny_model_dir, tiny_tokenizer, tmp_path
):
    output = str(tmp_path / "dying")
    results = os.path.join(output, "results.jsonl")
    with transformers_serve(tiny_model_dir) as (dying_url, process):

        def kill_after_first_record():
            deadline = time.monotonic() + 120
            while not _lines(results) and time.monotonic() < deadline:
                time.sleep(0.01)
            process.kill()

        killer = threading.Thread(target=kill_after_first_record)
        killer.start()
        backend = OpenAIBackend(dying_url, tiny_model_dir, tiny_tokenizer, max_retries=1, backoff=0.05)
        first = evaluate(
            backend, tiny_tokenizer, ladder, output, agent_config=SMALL_AGENT, batch_size=1, workers=1, plot=False
        )
        killer.join()
    records = _lines(results)
    ok = [r for r in records if r["status"] == "ok"]
    failed = [r for r in records if r["status"] == "failed"]
    assert len(records) == 6 and ok and failed
    for record in failed:
        assert "BackendError" in record["error"] and "127.0.0.1" in record["error"]
        assert "score" not in record and "metrics" not in record and "prediction" not in record
    overall = first.summary["overall"]
    assert (overall["n"], overall["failed"], overall["pending"]) == (len(ok), len(failed), 0)
    assert sum(g["n"] for g in first.summary["groups"]) == len(ok)  # failed samples are in no accuracy

    rerun = evaluate(
        OpenAIBackend(server, tiny_model_dir, tiny_tokenizer),
        tiny_tokenizer,
        ladder,
        output,
        agent_config=SMALL_AGENT,
        plot=False,
    )
    assert rerun.summary["overall"]["failed"] == 0 and rerun.summary["overall"]["n"] == 6
    final = _lines(results)
    assert sorted(r["id"] for r in final) == sorted(f"data/{i}" for i in ladder["id"])
    assert all(r["status"] == "ok" for r in final)
    assert rerun.cost["this_run"]["finished"] == len(failed)

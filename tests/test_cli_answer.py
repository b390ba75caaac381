import subprocess
import sys

from trl_memagent.cli import main
from trl_memagent.tiny import filler_text


def test_answer_prints_the_memory_trace_and_the_answer(tiny_model_dir, tmp_path, capsys):
    document = tmp_path / "doc.txt"
    document.write_text(filler_text(400), encoding="utf-8")
    args = ["answer", "--model", tiny_model_dir, "--document", str(document), "--question", "Which city?"]
    args += ["--chunk-tokens", "128", "--memory-tokens", "8", "--answer-tokens", "8", "--show-memory"]
    assert main(args) == 0
    out = capsys.readouterr().out
    num_chunks = out.count("--- memory after chunk")
    assert num_chunks >= 3 and f"--- memory after chunk {num_chunks}/{num_chunks} ---" in out
    assert out.count("--- answer ---") == 1


def test_cli_errors_name_the_problem(tmp_path, capsys):
    assert main(["bogus"]) == 2
    assert "unknown command 'bogus'" in capsys.readouterr().err
    result = subprocess.run(
        [sys.executable, "-m", "trl_memagent.cli", "answer", "--model", "m", "--document", str(tmp_path / "none.txt")]
        + ["--question", "q"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "is not a file" in result.stderr

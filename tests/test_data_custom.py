"""The custom format: validator errors for each bad input, and the loaders for every file kind."""

import json

import datasets
import pytest

from trl_memagent.data import DataValidationError, load_memagent_dataset, question_text, validate_dataset
from trl_memagent.data.cli import main


def _rows():
    return [
        {"prompt": "Where was the author born?", "context": "Document 1:\nA text.", "answers": ["Paris"], "extra": 1},
        {
            "prompt": [{"role": "user", "content": "Who wrote it?"}],
            "context": "",
            "answers": ["Ann", "Ann B."],
            "extra": 2,
        },
        {"prompt": "What year?", "context": "Long text " * 10, "answers": ["1999"], "extra": 3},
    ]


def test_valid_rows_string_and_conversational_prompts():
    rows = _rows()
    assert validate_dataset(rows) is rows
    assert question_text(rows[1]["prompt"]) == "Who wrote it?"
    dataset = datasets.Dataset.from_list([{k: v for k, v in r.items() if k != "prompt"} for r in rows])
    dataset = dataset.add_column("prompt", ["a?", "b?", "c?"])
    assert validate_dataset(dataset, source="memory") is dataset


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("prompt", None, "column 'prompt': missing column"),
        ("context", None, "column 'context': missing column"),
        ("answers", None, "column 'answers': missing column"),
        ("prompt", "   ", "column 'prompt': empty question"),
        ("prompt", [{"role": "user", "content": ""}], "column 'prompt': empty question"),
        ("prompt", [{"role": "system", "content": "x"}, {"role": "user", "content": "q"}], "one user message"),
        ("prompt", 42, "column 'prompt': a prompt must be a string"),
        ("context", 12, "column 'context': the document must be a string, got int"),
        ("context", ["a", "b"], "column 'context': the document must be a string, got list"),
        ("context", None, "column 'context': the document must be a string, got NoneType"),
        ("answers", "Paris", "wrap a single answer in a list"),
        ("answers", [], "got an empty list"),
        ("answers", ["Paris", 3], "answers[1] must be a string, got int"),
        ("answers", ["Paris", " "], "answers[1] is an empty string"),
        ("answers", None, "column 'answers': must be a non-empty list of strings, got NoneType"),
    ],
)
def test_each_bad_input_names_row_and_column(column, value, message):
    rows = _rows()
    if value is None and message.endswith("missing column"):
        del rows[2][column]
    else:
        rows[2][column] = value
    with pytest.raises(DataValidationError, match="my-source: row 2, ") as error:
        validate_dataset(rows, source="my-source")
    assert message in str(error.value)


def test_no_rows_is_an_error():
    with pytest.raises(DataValidationError, match="empty.jsonl: no rows"):
        validate_dataset([], source="empty.jsonl")


@pytest.fixture
def files(tmp_path):
    rows = _rows()
    flat = [dict(r, prompt=question_text(r["prompt"])) for r in rows]
    paths = {}
    paths["jsonl"] = tmp_path / "data.jsonl"
    conversational = [dict(r, prompt=[{"role": "user", "content": r["prompt"]}]) for r in flat]
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in conversational))
    paths["json"] = tmp_path / "data.json"
    paths["json"].write_text(json.dumps(flat))
    paths["parquet"] = tmp_path / "data.parquet"
    datasets.Dataset.from_list(flat).to_parquet(str(paths["parquet"]))
    directory = tmp_path / "hub_like"
    directory.mkdir()
    (directory / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in flat))
    paths["directory"] = directory
    return {k: str(v) for k, v in paths.items()}


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "directory"])
def test_load_each_file_kind(files, kind):
    dataset = load_memagent_dataset(files[kind])
    assert len(dataset) == 3
    assert [question_text(p) for p in dataset["prompt"]] == [
        "Where was the author born?",
        "Who wrote it?",
        "What year?",
    ]
    assert dataset["answers"] == [["Paris"], ["Ann", "Ann B."], ["1999"]]
    assert "extra" in dataset.column_names  # extra columns are kept for reward functions


def test_load_rejects_a_bad_file_with_its_name(tmp_path):
    path = tmp_path / "bad.jsonl"
    rows = [{"prompt": "q?", "context": "c", "answers": ["a"]}, {"prompt": "q2?", "context": "c", "answers": []}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataValidationError, match=r"bad.jsonl: row 1, column 'answers'"):
        load_memagent_dataset(str(path))


def test_reference_memagent_layout_is_mapped(tmp_path):
    """The reference training parquet (golds in reward_model) and eval JSON (question in `input`) load as is."""
    train = tmp_path / "hotpotqa_train.parquet"
    datasets.Dataset.from_list(
        [
            {
                "data_source": "hotpotqa",
                "prompt": [{"role": "user", "content": "Which city?"}],
                "context": "Document 1:\nParis is a city.",
                "ability": "memory",
                "reward_model": {"style": "rule", "ground_truth": ["Paris"]},
                "extra_info": {"index": 0, "question": "Which city?", "num_docs": 1},
            }
        ]
    ).to_parquet(str(train))
    loaded = load_memagent_dataset(str(train))
    assert loaded[0]["answers"] == ["Paris"] and question_text(loaded[0]["prompt"]) == "Which city?"
    evaluation = tmp_path / "eval_50.json"
    evaluation.write_text(json.dumps([{"context": "c", "input": "Who?", "answers": ["Bo"], "num_docs": 50}]))
    assert load_memagent_dataset(str(evaluation))[0]["prompt"] == "Who?"


def test_cli_validate(files, tmp_path, capsys):
    assert main(["validate", files["parquet"]]) == 0
    assert "3 rows, valid" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q", "context": 5, "answers": ["a"]}) + "\n")
    assert main(["validate", str(bad)]) == 1
    assert "row 0, column 'context'" in capsys.readouterr().err


def test_dataset_errors_are_found_on_arrow_columns_with_the_right_row():
    """Datasets are checked without building document strings; row numbers follow select/shuffle."""
    good = {"prompt": "q?", "context": "text", "answers": ["a"]}
    rows = [good, good, {"prompt": "q?", "context": None, "answers": ["a"]}, good]
    dataset = datasets.Dataset.from_list(rows)
    with pytest.raises(
        DataValidationError, match="ds: row 2, column 'context': the document must be a string, got None"
    ):
        validate_dataset(dataset, source="ds")
    with pytest.raises(DataValidationError, match="ds: row 0, column 'context'"):
        validate_dataset(dataset.select([2, 0, 1]), source="ds")
    validate_dataset(dataset.select([0, 1, 3]), source="ds")
    numbers = datasets.Dataset.from_dict({"prompt": ["q?"] * 2, "context": [1, 2], "answers": [["a"]] * 2})
    with pytest.raises(DataValidationError, match="row 0, column 'context': the document must be a string, got int"):
        validate_dataset(numbers, source="ds")
    no_answers = datasets.Dataset.from_dict({"prompt": ["q?"], "context": ["c"]})
    with pytest.raises(DataValidationError, match=r"row 0, column 'answers': missing column \(the row has: context"):
        validate_dataset(no_answers, source="ds")
    empty_question = datasets.Dataset.from_list([good, {"prompt": "", "context": None, "answers": []}])
    with pytest.raises(DataValidationError, match="row 1, column 'prompt': empty question"):
        validate_dataset(empty_question, source="ds")

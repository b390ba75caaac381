"""RULER-HQA on a HotpotQA-format file written here (36 questions, 303 unique paragraphs)."""

import json
import os
import random
import re

import pytest

from trl_memagent.data import build_ruler_hqa, load_memagent_dataset, load_ruler_hqa, read_hotpotqa
from trl_memagent.data.cli import main
from trl_memagent.data.io import load_file

NUM_QUESTIONS = 36
NUM_SHARED = 15


def _questions(seed: int = 0) -> list[dict]:
    """Original-layout rows: 2 gold + 6 own distractors + 2 paragraphs shared across questions, shuffled."""
    rng = random.Random(seed)
    shared = [[f"Shared {k}", [f"Shared paragraph {k}.", f" It is shared {k}."]] for k in range(NUM_SHARED)]
    rows = []
    for q in range(NUM_QUESTIONS):
        paragraphs = [[f"Gold {q}-{g}", [f"Gold {q}-{g} opens.", f" Answer part {g} of {q}."]] for g in range(2)]
        paragraphs += [[f"Other {q}-{d}", [f"Other {q}-{d} text.", " Filler."]] for d in range(6)]
        paragraphs += rng.sample(shared, 2)
        rng.shuffle(paragraphs)
        rows.append(
            {
                "_id": f"q{q:03d}",
                "question": f"What is the answer of question {q}?",
                "answer": f"answer {q}",
                "supporting_facts": [[f"Gold {q}-0", 0], [f"Gold {q}-1", 1]],
                "context": paragraphs,
            }
        )
    return rows


@pytest.fixture(scope="module")
def hotpot_rows():
    return _questions()


@pytest.fixture(scope="module")
def hotpot_file(tmp_path_factory, hotpot_rows):
    path = tmp_path_factory.mktemp("hotpot") / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(hotpot_rows))
    return str(path)


def _documents(context: str) -> tuple[list[int], list[str]]:
    """Split a context into (document numbers, document texts), independently of the builder."""
    parts = re.split(r"(?:^|\n\n)Document (\d+):\n", context)
    assert parts[0] == ""
    return [int(n) for n in parts[1::2]], parts[2::2]


def _paragraph(pair) -> str:
    return pair[0] + "\n" + "".join(pair[1])


def test_read_pool_and_paragraph_text(hotpot_file, hotpot_rows):
    split = read_hotpotqa(hotpot_file, progress=False)
    expected = sorted({_paragraph(p) for row in hotpot_rows for p in row["context"]})
    assert split.pool == expected
    assert len(split.pool) == NUM_QUESTIONS * 8 + NUM_SHARED
    assert split.pool[0].startswith("Gold 0-0\nGold 0-0 opens. Answer part 0 of 0.")  # sentences keep their spaces
    first = split.questions[0]
    assert [split.pool[i] for i in first.own_docs[:2]] == [
        _paragraph(p) for p in sorted(hotpot_rows[0]["context"])[:2]
    ]
    assert sorted(split.pool[i] for i in first.own_docs) == sorted(_paragraph(p) for p in hotpot_rows[0]["context"])


@pytest.fixture(scope="module")
def builds(tmp_path_factory, hotpot_file):
    """Full and index-only builds of N=20 and N=60, in both placements, plus a repeat of one of them."""
    out = {}
    for name, kwargs in {
        "reference": {},
        "reference_again": {},
        "random": {"placement": "random"},
        "other_seed": {"placement": "random", "seed": 1},
        "index_only": {"index_only_above": 0},
    }.items():
        directory = str(tmp_path_factory.mktemp(name))
        paths = build_ruler_hqa(
            hotpot_file, directory, num_docs=[20, 60], num_questions=None, progress=False, **kwargs
        )
        out[name] = paths
    return out


@pytest.mark.parametrize("placement", ["reference", "random"])
def test_every_sample_has_n_numbered_documents_with_its_gold(builds, hotpot_rows, placement):
    by_id = {row["_id"]: row for row in hotpot_rows}
    for path, n in zip(builds[placement], [20, 60]):
        dataset = load_ruler_hqa(path)
        assert len(dataset) == NUM_QUESTIONS
        for row in dataset:
            numbers, docs = _documents(row["context"])
            assert numbers == list(range(1, n + 1))
            assert row["num_docs"] == n
            source = by_id[row["id"]]
            assert row["prompt"] == source["question"] and row["answers"] == [source["answer"]]
            own = [_paragraph(p) for p in source["context"]]
            assert all(doc in docs for doc in own)  # the question's own 10 paragraphs, both gold among them
            gold = {_paragraph(p) for p in source["context"] if p[0].startswith("Gold")}
            assert {docs[i - 1] for i in row["gold_docs"]} == gold
            assert len(set(docs)) == n  # no paragraph twice


def test_reference_placement_fixes_gold_positions_random_varies(builds):
    for reference_path, random_path in zip(builds["reference"], builds["random"]):
        reference = [tuple(r["gold_docs"]) for r in load_ruler_hqa(reference_path)]
        random_ = [tuple(r["gold_docs"]) for r in load_ruler_hqa(random_path)]
        assert len(set(reference)) == 1, reference
        assert len(set(random_)) > NUM_QUESTIONS // 2, random_
    # The distractors differ from question to question in both modes.
    contexts = [_documents(r["context"])[1] for r in load_ruler_hqa(builds["reference"][1])]
    assert len({tuple(sorted(c)) for c in contexts}) == NUM_QUESTIONS


def test_same_seed_same_output_other_seed_differs(builds):
    for a, b in zip(builds["reference"], builds["reference_again"]):
        assert load_ruler_hqa(a).to_list() == load_ruler_hqa(b).to_list()
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()
    assert load_ruler_hqa(builds["random"][0])["context"] != load_ruler_hqa(builds["other_seed"][0])["context"]


def test_index_only_rebuilds_the_full_text_exactly(builds):
    for full_path, index_path in zip(builds["reference"], builds["index_only"]):
        full, rebuilt = load_ruler_hqa(full_path), load_ruler_hqa(index_path)
        assert "context" not in load_file(index_path).column_names
        assert rebuilt.to_list() == full.to_list()
        assert rebuilt[3]["context"] == full[3]["context"]
    assert os.path.getsize(builds["index_only"][1]) < os.path.getsize(builds["reference"][1]) / 3


def test_hub_layout_jsonl_gives_the_same_build(tmp_path, hotpot_rows, hotpot_file):
    path = tmp_path / "hotpot.jsonl"
    with open(path, "w") as f:
        for row in hotpot_rows:
            hub = {
                "id": row["_id"],
                "question": row["question"],
                "answer": row["answer"],
                "type": "bridge",
                "level": "hard",
                "supporting_facts": {
                    "title": [t for t, _ in row["supporting_facts"]],
                    "sent_id": [s for _, s in row["supporting_facts"]],
                },
                "context": {"title": [p[0] for p in row["context"]], "sentences": [p[1] for p in row["context"]]},
            }
            f.write(json.dumps(hub) + "\n")
    (a,) = build_ruler_hqa(str(path), str(tmp_path / "hub"), num_docs=[30], num_questions=5, progress=False)
    (b,) = build_ruler_hqa(hotpot_file, str(tmp_path / "orig"), num_docs=[30], num_questions=5, progress=False)
    assert load_ruler_hqa(a).to_list() == load_ruler_hqa(b).to_list()


def test_cli_ladder_with_ids_and_index_only_sets(tmp_path, hotpot_file):
    ids_file = tmp_path / "ids.jsonl"
    ids_file.write_text("".join(json.dumps({"id": f"q{k:03d}"}) + "\n" for k in (7, 3, 11)))
    out = tmp_path / "ladder"
    argv = ["ruler-hqa", "--source", hotpot_file, "--out-dir", str(out), "--num-docs", "20", "100"]
    argv += ["--ids-from", str(ids_file), "--index-only-above", "50", "--format", "jsonl"]
    assert main(argv) == 0
    assert sorted(os.listdir(out)) == ["pool.parquet", "ruler_hqa_100.jsonl", "ruler_hqa_20.jsonl"]
    large = load_memagent_dataset(str(out / "ruler_hqa_100.jsonl"))  # validated, text rebuilt
    assert large["id"] == ["q007", "q003", "q011"]
    assert [len(_documents(c)[0]) for c in large["context"]] == [100, 100, 100]
    with open(out / "ruler_hqa_100.jsonl") as f:
        assert "doc_indices" in json.loads(f.readline())


def test_clear_errors(tmp_path, hotpot_file):
    with pytest.raises(ValueError, match="below question 'q000'"):
        build_ruler_hqa(hotpot_file, str(tmp_path / "a"), num_docs=[5], num_questions=1, progress=False)
    with pytest.raises(ValueError, match="the pool has 293 left"):
        build_ruler_hqa(hotpot_file, str(tmp_path / "b"), num_docs=[400], num_questions=1, progress=False)
    with pytest.raises(ValueError, match="requested ids are not in the HotpotQA source"):
        build_ruler_hqa(hotpot_file, str(tmp_path / "c"), num_docs=[20], ids=["nope"], progress=False)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"_id": "x", "question": "q?", "answer": "a", "context": [["t", "not a list"]]}]))
    with pytest.raises(ValueError, match=r"bad.json: question 0: context\[0\]"):
        read_hotpotqa(str(bad), progress=False)

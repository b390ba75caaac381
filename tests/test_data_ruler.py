"""Synthetic RULER tasks: exact token lengths, needle depths, and answers checked against the context itself."""

import json
import re
from collections import Counter

import pytest

from trl_memagent.data import OFFLINE_TASKS, RulerConfig, build_ruler_dataset, load_memagent_dataset
from trl_memagent.data.cli import main
from trl_memagent.data.haystack import NOISE
from trl_memagent.data.ruler import fit_units

LENGTHS = (4096, 16384, 65536)
NEEDLE = re.compile(r"One of the special magic \w+ for (.+?) is: (\S+?)\.$")


def _count(tokenizer, text):
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _squad_file(path, num_articles=50, paragraphs=8):
    data = []
    for a in range(num_articles):
        article = {"title": f"Article {a}", "paragraphs": []}
        for p in range(paragraphs):
            context = f"Paragraph {p} of article {a} tells that the code of item {a}-{p} is K{a}x{p}."
            qas = [
                {"id": f"{a}-{p}", "question": f"What is the code of item {a}-{p}?", "is_impossible": False},
                {"id": f"{a}-{p}-x", "question": "Unanswerable?", "is_impossible": True, "answers": []},
            ]
            qas[0]["answers"] = [{"text": f"K{a}x{p}", "answer_start": 0}] * 2
            article["paragraphs"].append({"context": context, "qas": qas})
        data.append(article)
    path.write_text(json.dumps({"version": "v2.0", "data": data}))
    return str(path)


def _hotpot_file(path, num_questions=120):
    rows = []
    for q in range(num_questions):
        context = [[f"Title {q}-{k}", [f"Sentence {k} about {q}.", f" The value is V{q}v{k}."]] for k in range(10)]
        rows.append(
            {
                "_id": f"h{q}",
                "question": f"What is the value of {q}?",
                "answer": f"V{q}v0",
                "supporting_facts": [[f"Title {q}-0", 1], [f"Title {q}-1", 0]],
                "context": context,
            }
        )
    path.write_text(json.dumps(rows))
    return str(path)


@pytest.fixture(scope="module")
def qa_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("qa")
    return _squad_file(directory / "squad.json"), _hotpot_file(directory / "hotpot.json")


@pytest.fixture(scope="module")
def ruler_sets(tiny_tokenizer, qa_files):
    """Every task at 4K, 16K (2 samples each) and 64K tokens (1 sample; QA up to what the small files hold)."""
    squad, hotpot = qa_files
    sets = {}
    for target in LENGTHS:
        tasks = list(OFFLINE_TASKS) + (["qa_1", "qa_2"] if target < 65536 else [])
        config = RulerConfig(
            tasks=tasks,
            target_tokens=[target],
            num_samples=1 if target == 65536 else 2,
            squad_file=squad,
            hotpotqa_file=hotpot,
        )
        sets[target] = build_ruler_dataset(tiny_tokenizer, config)
    return sets


@pytest.mark.parametrize("target", LENGTHS)
def test_lengths_within_two_percent_below_target(ruler_sets, tiny_tokenizer, target):
    dataset = ruler_sets[target]
    assert set(dataset.column_names) >= {"prompt", "context", "answers", "task", "target_tokens", "id"}
    assert len(dataset) == (len(OFFLINE_TASKS) if target == 65536 else 2 * (len(OFFLINE_TASKS) + 2))
    for row in dataset:
        count = _count(tiny_tokenizer, row["context"])
        assert count == row["num_tokens"]
        assert 0.98 * target <= count <= target, (row["id"], count)
        assert row["target_tokens"] == target


def _units_and_needles(task, context):
    """Split a NIAH context into haystack units and (position, key, value) of each needle."""
    if task == "niah_single_1" or task.startswith("niah_multikey_2") or task.startswith("niah_multikey_3"):
        pieces = context.split("\n")
    else:
        pieces = re.split(r"(?<=\.) ", context)
    return pieces, [(i, *NEEDLE.match(p).groups()) for i, p in enumerate(pieces) if NEEDLE.match(p)]


@pytest.mark.parametrize("target", LENGTHS)
def test_needles_at_their_depths_and_answers_in_context(ruler_sets, target):
    for row in ruler_sets[target]:
        if not row["task"].startswith("niah"):
            continue
        pieces, needles = _units_and_needles(row["task"], row["context"])
        if row["task"] in ("niah_multikey_2", "niah_multikey_3"):  # the haystack is made of other needles
            assert all(NEEDLE.match(p) for p in pieces)
            needles = [n for n in needles if n[1] in row["prompt"]]
        elif row["task"] == "niah_single_1":
            assert all(p == NOISE for k, p in enumerate(pieces) if k not in [n[0] for n in needles])
        assert len(needles) == len(row["depths"])
        units = len(pieces) - len(needles)
        for j, ((position, _, _), depth) in enumerate(zip(needles, row["depths"])):
            before = position - j  # haystack units before this needle
            assert abs(before - depth * units) <= 1, (row["id"], before, depth, units)
        values = {(key, value) for _, key, value in needles}
        asked = {key for key, _ in values if key in row["prompt"]}
        assert sorted(v for k, v in values if k in asked) == sorted(row["answers"])
        expected_answers = {"niah_multivalue": 4, "niah_multiquery": 4}.get(row["task"], 1)
        assert len(row["answers"]) == expected_answers


def test_explicit_depths(tiny_tokenizer):
    dataset = build_ruler_dataset(
        tiny_tokenizer, tasks=["niah_single_1"], target_tokens=[2048], num_samples=3, depths=[0.0, 0.5, 1.0]
    )
    assert dataset["depths"] == [[0.0], [0.5], [1.0]]
    first, middle, last = (row["context"].split("\n") for row in dataset)
    assert NEEDLE.match(first[0]) and NEEDLE.match(last[-1])
    index = next(i for i, line in enumerate(middle) if NEEDLE.match(line))
    assert abs(index - (len(middle) - 1) / 2) <= 1


def _chain_members(context, value):
    """Variables that end up holding `value`, following the assignments in reading order."""
    holding = set()
    for target, source in re.findall(r"VAR (\w+) = (VAR \w+|\d+)", context):
        if source == value or (source.startswith("VAR ") and source[4:] in holding):
            holding.add(target)
    return holding


@pytest.mark.parametrize("target", LENGTHS)
def test_variable_tracking_answers_follow_the_chain(ruler_sets, target):
    for row in ruler_sets[target].filter(lambda r: r["task"] == "vt"):
        value = re.search(r"assigned the value (\d+)", row["prompt"]).group(1)
        assert _chain_members(row["context"], value) == set(row["answers"])
        assert len(row["answers"]) == 5
        positions = [row["context"].index(f"VAR {name} =") for name in row["answers"]]
        assert positions == sorted(positions)  # each hop comes after the variable it copies


@pytest.mark.parametrize("target", LENGTHS)
def test_frequent_and_common_words_match_a_direct_count(ruler_sets, target):
    for row in ruler_sets[target].filter(lambda r: r["task"] == "fwe"):
        counts = Counter(row["context"].split())
        del counts["..."]
        ranked = counts.most_common()
        assert {word for word, _ in ranked[:3]} == set(row["answers"])
        assert ranked[2][1] > ranked[3][1]
    for row in ruler_sets[target].filter(lambda r: r["task"] == "cwe"):
        words = re.findall(r"(\d+)\. (\w+)", row["context"])
        assert [int(n) for n, _ in words] == list(range(1, len(words) + 1))
        counts = Counter(word for _, word in words)
        assert {word for word, _ in counts.most_common(10)} == set(row["answers"])
        assert {counts[w] for w in row["answers"]} == {30}
        assert set(counts.values()) == {30, 3}


@pytest.mark.parametrize("target", LENGTHS[:2])
def test_qa_contexts_hold_the_gold_documents(ruler_sets, target):
    for row in ruler_sets[target].filter(lambda r: r["task"].startswith("qa")):
        numbers = [int(n) for n in re.findall(r"(?:^|\n\n)Document (\d+):\n", row["context"])]
        assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) > 10
        assert all(answer in row["context"] for answer in row["answers"])
        question = row["prompt"].removeprefix("Answer the question based on the given documents. ")
        if row["task"] == "qa_1":
            item = re.search(r"item (\d+-\d+)", question).group(1)
            assert f"the code of item {item} is" in row["context"]
            assert row["answers"] == ["K" + item.replace("-", "x")]
        else:
            q = re.search(r"value of (\d+)", question).group(1)
            assert f"Title {q}-0\n" in row["context"] and f"Title {q}-1\n" in row["context"]


def test_same_seed_same_samples_other_seed_differs(tiny_tokenizer):
    config = {"tasks": ["niah_single_2", "vt", "fwe"], "target_tokens": [2048], "num_samples": 2}
    first = build_ruler_dataset(tiny_tokenizer, **config).to_list()
    assert build_ruler_dataset(tiny_tokenizer, **config).to_list() == first
    other = build_ruler_dataset(tiny_tokenizer, seed=1, **config).to_list()
    assert all(a["context"] != b["context"] for a, b in zip(first, other))


def test_user_haystack_file(tiny_tokenizer, tmp_path):
    sentences = [f"Line {k} of my own essay tells a story about rivers." for k in range(50)]
    path = tmp_path / "essay.txt"
    path.write_text("\n".join(" ".join(sentences[k : k + 5]) for k in range(0, 50, 5)))
    dataset = build_ruler_dataset(
        tiny_tokenizer, tasks=["niah_single_2"], target_tokens=[4096], num_samples=1, haystack_file=str(path)
    )
    pieces = re.split(r"(?<=\.) ", dataset[0]["context"])
    haystack = [p for p in pieces if not NEEDLE.match(p)]
    assert set(haystack) <= set(sentences) and len(haystack) > len(sentences)  # cycled when too short
    assert 0.98 * 4096 <= dataset[0]["num_tokens"] <= 4096


def test_fit_units_on_a_known_measure():
    def measure(n):  # 7 tokens a unit, 13 of overhead, and a wobble that breaks proportionality
        return 13 + 7 * n + n % 3

    for target, guess in [(1000, 1), (1000, 500), (70_000, 10), (25, 1)]:
        n = fit_units(measure, target, guess)
        assert measure(n) <= target < measure(n + 1)
    assert fit_units(measure, 10_000, 5, max_units=40) == 40
    assert measure(fit_units(measure, 10_000, 5, slack=50)) >= 10_000 - 50
    with pytest.raises(ValueError, match="single haystack unit already gives 21 tokens"):
        fit_units(measure, 10, 4)


def test_config_errors(tiny_tokenizer):
    with pytest.raises(ValueError, match="unknown RULER task"):
        RulerConfig(tasks=["niah_single_9"])
    with pytest.raises(ValueError, match="depths must be"):
        RulerConfig(depths=[1.5])
    with pytest.raises(ValueError, match=r"needs squad_file \(--squad-file\)"):
        build_ruler_dataset(tiny_tokenizer, tasks=["qa_1"], target_tokens=[1024], num_samples=1)


def test_cli_writes_a_ladder(tmp_path):
    out = tmp_path / "ruler"
    argv = ["ruler", "--tokenizer", "tiny", "--out-dir", str(out), "--tasks", "niah_single_1", "cwe"]
    argv += ["--lengths", "1024", "2048", "--num-samples", "2", "--format", "parquet"]
    assert main(argv) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"{t}_{n}.parquet" for t in ("cwe", "niah_single_1") for n in (1024, 2048)]
    dataset = load_memagent_dataset(str(out / "cwe_1024.parquet"))
    assert len(dataset) == 2 and dataset[0]["task"] == "cwe" and len(dataset[0]["answers"]) == 10

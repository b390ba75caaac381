"""Verifiers and metrics against hand-computed tables (expected values are written out, never computed)."""

import pytest

from trl_memagent.rewards import (
    exact_match,
    extract_answer,
    extract_boxed,
    f1_score,
    last_boxed_only_string,
    memagent_multi_value_reward,
    memagent_reward,
    multi_value_reward,
    normalize_answer,
    qa_metrics,
    ruler_all_references,
    ruler_any_reference,
    strict_reward,
    strip_string,
    sub_exact_match,
)

BOXED_CASES = [
    # (text, expected content of the last \boxed{})
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("a \\boxed{1} b \\boxed{2} c", "2"),
    ("$\\boxed{42}$.", "42"),
    ("\\boxed{{Paris}}", "{Paris}"),
    ("\\boxed {Paris}", "Paris"),
    ("\\boxed Paris$ and more", "Paris"),
    ("\\boxed Paris", "Paris"),
    ("no box here", None),
    ("\\boxed{unclosed", None),
    ("\\boxed{a} then \\boxed", None),
]


@pytest.mark.parametrize(("text", "expected"), BOXED_CASES)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_last_boxed_only_string_keeps_the_wrapper():
    assert last_boxed_only_string("x \\boxed{\\frac{1}{2}} y") == "\\boxed{\\frac{1}{2}}"
    assert last_boxed_only_string("x") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("new york", "newyork"),
        ("a\nb", "ab"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("50\\%", "50"),
        ("\\$5", "5"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("x = .5", "x=0.5"),
        ("1/2", "1/2"),  # the reference reward does not rewrite a/b as \frac{a}{b}
        ("Paris.", "Paris."),  # nor strip punctuation
    ],
)
def test_strip_string(text, expected):
    assert strip_string(text) == expected


PAD_287 = " " + "x" * 286  # boxed answer starts exactly at the first character of the 300-char window
PAD_290 = " " + "x" * 289  # the window starts inside "\boxed", which is then lost

STRICT_CASES = [
    # (final answer text, golds, expected reward)
    ("The answer is \\boxed{\\frac{1}{2}}.", ["\\frac{1}{2}"], 1.0),
    ("\\boxed{\\frac{1}{2}}", ["1/2"], 0.0),
    ("First \\boxed{Paris}, then \\boxed{London}", ["London"], 1.0),
    ("First \\boxed{Paris}, then \\boxed{London}", ["Paris"], 0.0),
    ("The answer is Paris.", ["Paris"], 0.0),
    ("\\boxed{New York}", ["new york"], 1.0),
    ("\\boxed{New York}", ["NewYork"], 1.0),
    ("\\boxed{NEW YORK}", "New York", 1.0),
    ("\\boxed{New\tYork}", ["New York"], 0.0),  # only spaces and newlines are removed
    ("\\boxed{The Beatles}", ["Beatles"], 0.0),
    ("\\boxed{Paris.}", ["Paris"], 0.0),
    ("\\boxed{NYC}", ["New York City", "NYC"], 1.0),
    ("\\boxed{Boston}", ["New York City", "NYC"], 0.0),
    ("\\boxed{50\\%}", ["50"], 1.0),
    ("\\boxed{\\left( 1, 2 \\right)}", ["(1,2)"], 1.0),
    ("\\boxed{Paris", ["Paris"], 0.0),
    ("\\boxed Paris", ["paris"], 1.0),
    ("\\boxed{Paris}" + PAD_287, ["Paris"], 1.0),
    ("\\boxed{Paris}" + PAD_290, ["Paris"], 0.0),
    ("\\boxed{Paris}" + "y" * 400, ["Paris"], 0.0),
    ("\\boxed{Paris}" + "y" * 400 + "\\boxed{London}", ["London"], 1.0),
]


@pytest.mark.parametrize(("text", "golds", "expected"), STRICT_CASES)
def test_strict_reward(text, golds, expected):
    assert strict_reward(text, golds) == expected


def test_strict_reward_needs_a_gold():
    with pytest.raises(ValueError, match="golds"):
        strict_reward("\\boxed{x}", [])


def test_memagent_reward_trl_signature_and_formats():
    completions = [
        "so \\boxed{Paris}",
        [{"role": "assistant", "content": "I think \\boxed{new  york}"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "\\boxed{Rome}"}]}],
        "no box",
    ]
    answers = [["Paris"], "New York", ["Milan", "Rome"], ["no box"]]
    rewards = memagent_reward(
        prompts=["q"] * 4,
        completions=completions,
        completion_ids=[[1, 2]] * 4,
        answers=answers,
        question=["q"] * 4,
        trainer_state=None,
        log_metric=print,
    )
    assert rewards == [1.0, 1.0, 1.0, 0.0]
    assert memagent_reward.__name__ == "memagent_reward"


def test_reward_errors_name_the_problem():
    with pytest.raises(ValueError, match="answers"):
        memagent_reward(completions=["\\boxed{a}"], answers=[["a"], ["b"]])
    with pytest.raises(TypeError, match="completion"):
        memagent_reward(completions=[42], answers=[["a"]])


@pytest.mark.parametrize(
    ("prediction", "values", "expected"),
    [
        ("The values are 123, 456.", ["123", "456", "789"], 2 / 3),
        ("ALPHA and beta", ["alpha", "Beta"], 1.0),
        ("nothing", ["alpha", "beta", "gamma", "delta"], 0.0),
        ("gamma", ["alpha", "beta", "gamma", "delta"], 0.25),
    ],
)
def test_multi_value_reward(prediction, values, expected):
    assert multi_value_reward(prediction, values) == pytest.approx(expected)


def test_memagent_multi_value_reward_trl_signature():
    rewards = memagent_multi_value_reward(
        prompts=["q", "q"],
        completions=["1 and 2", [{"role": "assistant", "content": "only 3"}]],
        completion_ids=[[1], [2]],
        answers=[["1", "2"], ["3", "4"]],
    )
    assert rewards == [1.0, 0.5]
    assert memagent_multi_value_reward.__name__ == "memagent_multi_value_reward"


@pytest.mark.parametrize(
    ("prediction", "references", "all_expected", "any_expected"),
    [
        ("The key is 42.", ["42", "17"], 0.5, 1.0),
        ("Keys: 42, 17", ["42", "17"], 1.0, 1.0),
        ("nothing", ["42", "17"], 0.0, 0.0),
        ("MAGIC word", "magic", 1.0, 1.0),
    ],
)
def test_ruler_metrics(prediction, references, all_expected, any_expected):
    assert ruler_all_references(prediction, references) == all_expected
    assert ruler_any_reference(prediction, references) == any_expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Cat, sat!", "cat sat"),
        ("An apple a day", "apple day"),
        ("  New   York  ", "new york"),
        ("theater", "theater"),
        ("U.S.A.", "usa"),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


METRIC_CASES = [
    # (prediction, gold, em, sub_em, f1) -- f1 by hand: P = same/|pred|, R = same/|gold|, 2PR/(P+R)
    ("the cat sat", "cat sat down", 0.0, 1.0, 0.8),  # P=2/2, R=2/3
    ("Paris", "paris", 1.0, 1.0, 1.0),
    ("Paris, France", "Paris", 0.0, 1.0, 2 / 3),  # P=1/2, R=1
    ("x y x", "x x z", 0.0, 0.0, 2 / 3),  # common {x: 2}: P=2/3, R=2/3
    ("yes", "no", 0.0, 0.0, 0.0),
    ("No.", "no", 1.0, 1.0, 1.0),
    ("yes it is", "yes", 0.0, 1.0, 0.0),  # yes/no gold differs -> f1 0
    ("London", "Paris", 0.0, 0.0, 0.0),
    ("The.", "Paris", 0.0, 0.0, 0.0),  # normalizes to "": not a substring match
    ("The Beatles", "Beatles", 1.0, 1.0, 1.0),
]


@pytest.mark.parametrize(("prediction", "gold", "em", "sub_em", "f1"), METRIC_CASES)
def test_qa_metric_table(prediction, gold, em, sub_em, f1):
    assert exact_match(prediction, gold) == em
    assert sub_exact_match(prediction, gold) == sub_em
    assert f1_score(prediction, gold) == pytest.approx(f1)
    metrics = qa_metrics(prediction, [gold])
    assert metrics == pytest.approx({"em": em, "sub_em": sub_em, "f1": f1, "sub_em_any": sub_em})


def test_metrics_take_the_max_over_golds():
    assert exact_match("NYC", ["New York", "nyc"]) == 1.0
    assert sub_exact_match("in Paris", ["London", "Paris"]) == 1.0
    assert f1_score("new york city", ["york", "new york"]) == pytest.approx(0.8)  # 0.5 and 0.8


def test_qa_metrics_headline_uses_the_first_gold():
    assert qa_metrics("City of Light", ["Paris", "City of Light"]) == {
        "em": 0.0,
        "sub_em": 0.0,
        "f1": 0.0,
        "sub_em_any": 1.0,
    }
    zeros = {"em": 0.0, "sub_em": 0.0, "f1": 0.0, "sub_em_any": 0.0}
    assert qa_metrics(None, ["Paris"]) == zeros
    assert qa_metrics("", ["Paris"]) == zeros


def test_strict_reward_and_test_metric_disagree_as_upstream_users_saw():
    answer = "Based on the memory, \\boxed{The Beatles}"
    assert strict_reward(answer, ["Beatles"]) == 0.0
    assert qa_metrics(extract_answer(answer, "boxed"), ["Beatles"])["sub_em"] == 1.0


@pytest.mark.parametrize(
    ("text", "template", "expected"),
    [
        ("I think \\boxed{ Paris }.", "boxed", "Paris"),
        ("First \\boxed{1}, finally \\boxed{\\frac{1}{2}}", "boxed", "\\frac{1}{2}"),
        ("Therefore, the answer is Paris", "boxed", None),
        ("Therefore, the answer is **Paris**.", "plain", "Paris"),
        ("The answer is 42", "plain", "42"),
        ("the answer is A. Wait, THE ANSWER IS B.\n", "plain", "B"),
        ("It is Paris.", "plain", None),
        ("\\boxed{Paris}", "plain", None),
    ],
)
def test_extract_answer(text, template, expected):
    assert extract_answer(text, template) == expected


def test_extract_answer_rejects_unknown_template():
    with pytest.raises(ValueError, match="template"):
        extract_answer("x", "json")

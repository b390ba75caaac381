"""Answer verifiers (training rewards) and test metrics of MemAgent.

Two families, kept apart on purpose because upstream users confused them (validation ~50% vs test ~80%):

- **Training rewards** (`strict_reward`, `memagent_reward`): the reference code's
  `verl/utils/reward_score/hotpotqa.py::compute_score` of BytedTsinghua-SIA/MemAgent. Case- and
  space-insensitive, but punctuation and articles count.
- **Test metrics** (`exact_match`, `sub_exact_match`, `f1_score`, `qa_metrics`): the SQuAD/HotpotQA metrics
  of the reference evaluation utils (`taskutils/memory_eval/utils`), lenient on case, punctuation and
  articles. The paper's headline number is `sub_em` against the first gold answer.

`memagent_reward` and `memagent_multi_value_reward` follow TRL's reward-function protocol:
`reward_func(prompts=..., completions=..., completion_ids=..., **dataset_columns) -> list[float]`.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

# The reference reward only looks at the end of the answer: a `\boxed{}` quoted earlier in a long answer
# (for instance while restating the instruction) does not count.
REWARD_WINDOW_CHARS = 300

AnswerTemplate = Literal["boxed", "plain"]
Golds = str | Sequence[str]


# ----------------------------------------------------------------------------------------------------------
# \boxed{} extraction


def last_boxed_only_string(text: str) -> str | None:
    r"""The last `\boxed{...}` of `text` including its wrapper, or None when there is none or it is unbalanced.

    Braces are matched, so `\boxed{\frac{1}{2}}` is returned whole. The brace-less form `\boxed x` (a space
    after `\boxed`) runs, as in the reference, to the next `$` or to the end of the text. Unlike the
    reference, the *last* `\boxed` always decides the form (the reference prefers any earlier `\boxed `) and
    whitespace between `\boxed` and `{` is allowed (the reference scores `\boxed {x}` as `{x}`).
    """
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    rest = text[start + len("\\boxed") :]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        offset = start + len("\\boxed") + len(rest) - len(stripped)
        depth = 0
        for index in range(offset, len(text)):
            if text[index] == "{":
                depth += 1
            elif text[index] == "}":
                depth -= 1
                if depth == 0:
                    return "\\boxed{" + text[offset + 1 : index] + "}"
        return None
    if rest.startswith(" "):
        return "\\boxed " + rest[1:].split("$")[0]
    return None


def extract_boxed(text: str) -> str | None:
    r"""The content of the last `\boxed{...}` of `text` (see `last_boxed_only_string`), or None."""
    boxed = last_boxed_only_string(text)
    if boxed is None:
        return None
    if boxed.startswith("\\boxed{"):
        return boxed[len("\\boxed{") : -1]
    return boxed[len("\\boxed ") :]


# ----------------------------------------------------------------------------------------------------------
# Training reward (reference: BytedTsinghua-SIA/MemAgent, verl/utils/reward_score/hotpotqa.py)


def strip_string(text: str) -> str:
    r"""MATH-style normalization of the MemAgent training reward.

    Reproduces `strip_string` of the reference `hotpotqa.py` (itself a cut-down copy of verl's Hendrycks MATH
    `math.py` normalization): drop newlines, `\!`, `\left`, `\right`, `^{\circ}`, `^\circ`, `\$` and `\%`;
    turn `\\` into `\`, `tfrac`/`dfrac` into `frac`; write `" ."`/`"{."` as `" 0."`/`"{0."`; then remove
    **every space**. The reference deliberately leaves out the rest of verl's MATH normalization (unit words,
    `\text{}`, fraction/sqrt/`a/b` rewriting): unit-word stripping would delete words such as "a" or "m"
    from text answers. Lowercasing is done by the caller, as in the reference.
    """
    text = text.replace("\n", "")
    text = text.replace("\\!", "")
    text = text.replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "")
    text = text.replace("\\$", "")
    text = text.replace("\\%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    return text.replace(" ", "")


def _as_golds(golds: Golds, field: str = "golds") -> list[str]:
    """One gold string or a sequence of them, as a non-empty list of strings."""
    gold_list = [golds] if isinstance(golds, str) else list(golds)
    if not gold_list:
        raise ValueError(f"`{field}` is empty: at least one gold answer is needed to score a prediction.")
    for gold in gold_list:
        if not isinstance(gold, str):
            raise TypeError(f"`{field}` must hold strings, got {type(gold).__name__}: {gold!r}.")
    return gold_list


def strict_reward(prediction: str, golds: Golds) -> float:
    r"""The MemAgent training reward of one final answer: 1.0 or 0.0.

    Reference semantics (`hotpotqa.py::compute_score`): keep the last 300 characters of the answer and
    lowercase them; take the content of the last `\boxed{}`; lowercase each gold; 1.0 when the two are equal
    after `strip_string` (so case and spaces do not matter, punctuation and articles do); max over golds.
    No `\boxed{}` in the window scores 0.
    """
    gold_list = _as_golds(golds)
    boxed = extract_boxed(prediction[-REWARD_WINDOW_CHARS:].lower())
    if boxed is None:
        return 0.0
    answer = strip_string(boxed)
    return max(float(answer == strip_string(gold.lower())) for gold in gold_list)


def _completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or a conversation whose last message holds the answer."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, Sequence):  # multimodal content parts: [{"type": "text", "text": ...}]
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise TypeError(
        "A completion must be a string or a list of messages like [{'role': 'assistant', 'content': ...}], "
        f"got {type(completion).__name__}: {completion!r:.200}."
    )


def _check_batch(completions: Sequence[Any], answers: Sequence[Golds]) -> None:
    if len(answers) != len(completions):
        raise ValueError(
            f"`answers` has {len(answers)} rows but there are {len(completions)} completions: the dataset's "
            "`answers` column must hold the gold answers of every sample."
        )


def memagent_reward(completions: Sequence[Any], answers: Sequence[Golds], **kwargs: Any) -> list[float]:
    """TRL reward function: `strict_reward` of each completion against its row of the `answers` column.

    `answers` holds, per sample, a list of gold strings (or one string). Other TRL arguments (`prompts`,
    `completion_ids`, `trainer_state`, other dataset columns) are accepted and ignored.
    """
    _check_batch(completions, answers)
    return [strict_reward(_completion_text(c), golds) for c, golds in zip(completions, answers)]


# ----------------------------------------------------------------------------------------------------------
# Substring-coverage scores: the multi-value reward and the RULER metrics


def ruler_all_references(prediction: str, references: Golds) -> float:
    """RULER `string_match_all`: the fraction of references found (case-insensitive) in the prediction."""
    reference_list = _as_golds(references, "references")
    lowered = prediction.lower()
    return sum(float(ref.lower() in lowered) for ref in reference_list) / len(reference_list)


def ruler_any_reference(prediction: str, references: Golds) -> float:
    """RULER `string_match_part`: 1.0 when any reference is found (case-insensitive) in the prediction."""
    lowered = prediction.lower()
    return max(float(ref.lower() in lowered) for ref in _as_golds(references, "references"))


# The paper's multi-value reward R = |{y in Y : y appears in the answer}| / |Y| is RULER's string_match_all.
multi_value_reward = ruler_all_references


def memagent_multi_value_reward(completions: Sequence[Any], answers: Sequence[Golds], **kwargs: Any) -> list[float]:
    """TRL reward function: `multi_value_reward` of each whole completion against its row of `answers`."""
    _check_batch(completions, answers)
    return [multi_value_reward(_completion_text(c), golds) for c, golds in zip(completions, answers)]


# ----------------------------------------------------------------------------------------------------------
# Test metrics (reference: MemAgent taskutils/memory_eval/utils, SQuAD/HotpotQA style)


_PUNCTUATION = frozenset(string.punctuation)
_YES_NO = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, drop ASCII punctuation, drop the words a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _exact_match_one(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _sub_exact_match_one(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    # An answer that normalizes to nothing (e.g. "The.") would be a substring of every gold; the reference
    # only guards against an empty raw prediction, we guard the normalized one too.
    if not pred:
        return 0.0
    return float(ref in pred or pred in ref)


def _f1_one(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _YES_NO or ref in _YES_NO) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    num_same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if num_same == 0:
        return 0.0
    precision, recall = num_same / len(pred_tokens), num_same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, golds: Golds) -> float:
    """1.0 when the normalized prediction equals a normalized gold (max over a list of golds)."""
    return max(_exact_match_one(prediction, gold) for gold in _as_golds(golds))


def sub_exact_match(prediction: str, golds: Golds) -> float:
    """1.0 when, after normalization, a gold is in the prediction or the prediction in a gold (max over golds)."""
    return max(_sub_exact_match_one(prediction, gold) for gold in _as_golds(golds))


def f1_score(prediction: str, golds: Golds) -> float:
    """Token F1 of the normalized strings (max over golds); 0 when a yes/no/noanswer side differs."""
    return max(_f1_one(prediction, gold) for gold in _as_golds(golds))


def qa_metrics(prediction: str | None, golds: Golds) -> dict[str, float]:
    """The test metrics of one extracted answer, as the reference evaluation computes them.

    `em`, `sub_em` and `f1` are scored against the **first** gold answer only (reference `ruler_hqa.py`:
    `answer = answers[0]`; `sub_em` is the paper's headline). `sub_em_any` is `sub_em` against any gold,
    for datasets with several acceptable answers. A missing or empty prediction (no answer could be
    extracted) scores 0 everywhere.
    """
    gold_list = _as_golds(golds)
    if not prediction:
        return {"em": 0.0, "sub_em": 0.0, "f1": 0.0, "sub_em_any": 0.0}
    first = gold_list[0]
    return {
        "em": _exact_match_one(prediction, first),
        "sub_em": _sub_exact_match_one(prediction, first),
        "f1": _f1_one(prediction, first),
        "sub_em_any": sub_exact_match(prediction, gold_list),
    }


_ANSWER_IS = re.compile(r"the answer is", re.IGNORECASE)


def extract_answer(text: str, template: AnswerTemplate = "boxed") -> str | None:
    r"""The answer of a final-turn completion, for the test metrics; None when none can be found.

    - `"boxed"`: the content of the last `\boxed{}` (whole text, no 300-character window), stripped.
    - `"plain"` (the "Therefore, the answer is ..." template): the text after the last "the answer is"
      (case-insensitive; the reference matched lowercase only), with markdown `*` removed and surrounding
      whitespace and periods stripped.

    No fallback to the whole text: like the reference evaluation, an answer that does not follow the
    template scores 0 (`qa_metrics(None, ...)`); a whole-text fallback would inflate `sub_em`, which accepts
    any text containing the gold.
    """
    if template == "boxed":
        boxed = extract_boxed(text)
        return None if boxed is None else boxed.strip()
    if template == "plain":
        text = text.replace("*", "")
        matches = list(_ANSWER_IS.finditer(text))
        if not matches:
            return None
        return text[matches[-1].end() :].strip().strip(".").strip()
    raise ValueError(f"Unknown answer template {template!r}: expected 'boxed' or 'plain'.")

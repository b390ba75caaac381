"""The long-context baseline: the whole document in one prompt, truncated in the middle to a window.

This is how the paper's long-context baselines read RULER-HQA (the QwenLong-L1 / LongBench prompt, answer
after "Therefore, the answer is"), so users can see where plain long context breaks next to the agent.
The prompt is assembled in token space: the chat-wrapped text before and after the document is tokenized
once, and the document's own token ids are cut in the middle (first and last halves kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends import GenerationBackend
from ..chunking import tokenize_document, truncate_center

BASELINE_TEMPLATE = """Please read the following text and answer the question below.

<text>
{context}
</text>

{question}

Format your response as follows: "Therefore, the answer is (insert answer here)"."""
BASELINE_ANSWER_TEMPLATE = "plain"
_CONTEXT = "\x00CONTEXT\x00"


@dataclass
class BaselineAnswer:
    """One baseline call: the answer text and what it cost."""

    answer: str
    prompt_tokens: int
    completion_tokens: int
    doc_tokens: int
    kept_doc_tokens: int


class BaselinePrompter:
    """Builds whole-document prompts for one tokenizer, keeping each prompt plus answer within `window` tokens."""

    def __init__(self, tokenizer, window: int, answer_tokens: int):
        if window <= answer_tokens:
            raise ValueError(f"baseline window ({window}) must exceed answer_tokens ({answer_tokens})")
        self.tokenizer = tokenizer
        self.window = window
        self.answer_tokens = answer_tokens

    def prompt_ids(self, question: str, doc_ids: np.ndarray) -> tuple[list[int], int]:
        """The prompt's token ids and how many document tokens it kept."""
        text = BASELINE_TEMPLATE.replace("{question}", question.strip()).replace("{context}", _CONTEXT)
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        head, tail = text.split(_CONTEXT)
        head_ids = self.tokenizer.encode(head, add_special_tokens=False)
        tail_ids = self.tokenizer.encode(tail, add_special_tokens=False)
        budget = self.window - self.answer_tokens - len(head_ids) - len(tail_ids)
        if budget <= 0:
            raise ValueError(
                f"baseline window {self.window} leaves no room for the document: the prompt without it takes "
                f"{len(head_ids) + len(tail_ids)} tokens and the answer {self.answer_tokens}"
            )
        kept = truncate_center(doc_ids, budget)
        return head_ids + kept.tolist() + tail_ids, len(kept)


def run_baseline(
    backend: GenerationBackend, prompter: BaselinePrompter, questions: list[str], documents: list[str]
) -> list[BaselineAnswer]:
    """One backend call answering every (question, document) of a group from the (truncated) document."""
    tokenizer = prompter.tokenizer
    docs = [tokenize_document(tokenizer, d) for d in documents]
    prompts, kept = zip(*(prompter.prompt_ids(q, d) for q, d in zip(questions, docs)))
    generations = backend.generate(list(prompts), prompter.answer_tokens)
    return [
        BaselineAnswer(
            answer=tokenizer.decode(g.completion_ids, skip_special_tokens=True),
            prompt_tokens=len(p),
            completion_tokens=len(g.completion_ids),
            doc_tokens=len(d),
            kept_doc_tokens=k,
        )
        for p, d, g, k in zip(prompts, docs, generations, kept)
    ]

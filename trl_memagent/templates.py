"""The MemAgent prompts, assembled in token space.

The literal pieces of each template are tokenized once per tokenizer; the question ids, the previous
memory's generated ids and a slice of the document's ids are spliced in. Nothing the model sampled is
decoded and re-encoded, so training sees exactly the tokens the policy produced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Exact strings of the reference implementation (shared/docs/memagent.md §2). Note the space after
# "<problem>" and the newline after the last line.
MEMORY_TEMPLATE = """You are presented with a problem, a section of an article that may contain the answer to the problem, and a previous memory. Please read the provided section carefully and update the memory with the new information that helps to answer the problem. Be sure to retain all relevant details from the previous memory while adding any new, useful information.

<problem> 
{prompt}
</problem>

<memory>
{memory}
</memory>

<section>
{chunk}
</section>

Updated memory:
"""

FINAL_TEMPLATE_BOXED = """You are presented with a problem and a previous memory. Please answer the problem based on the previous memory and put the answer in \\boxed{{}}.

<problem> 
{prompt}
</problem>

<memory>
{memory}
</memory>

Your answer:
"""

FINAL_TEMPLATE_PLAIN = """You are presented with a problem and a previous memory. Please answer the problem based on the previous memory and format your response as follows "Therefore, the answer is (insert answer here)".

<problem> 
{prompt}
</problem>

<memory>
{memory}
</memory>

Your answer:
"""

INITIAL_MEMORY = "No previous memory"
FinalPrompt = Literal["boxed", "plain"]
_SENTINELS = {"prompt": "\x00PROMPT\x00", "memory": "\x00MEMORY\x00", "chunk": "\x00CHUNK\x00"}


@dataclass(frozen=True)
class _TokenTemplate:
    """A chat-wrapped template split at its placeholders: literal id segments and field names, in order."""

    parts: tuple[tuple[int, ...] | str, ...]

    def build(self, **fields: list[int]) -> list[int]:
        ids: list[int] = []
        for part in self.parts:
            ids.extend(fields[part] if isinstance(part, str) else part)
        return ids


def _compile(tokenizer, template: str) -> _TokenTemplate:
    text = template.format(**_SENTINELS)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    by_sentinel = {v: k for k, v in _SENTINELS.items()}
    pattern_order = sorted((text.index(s), s) for s in by_sentinel if s in text)
    parts: list[tuple[int, ...] | str] = []
    cursor = 0
    for position, sentinel in pattern_order:
        parts.append(tuple(tokenizer.encode(text[cursor:position], add_special_tokens=False)))
        parts.append(by_sentinel[sentinel])
        cursor = position + len(sentinel)
    parts.append(tuple(tokenizer.encode(text[cursor:], add_special_tokens=False)))
    return _TokenTemplate(tuple(parts))


class PromptBuilder:
    """Builds memory-update and final-answer prompts as token ids for one tokenizer."""

    def __init__(self, tokenizer, final_prompt: FinalPrompt = "boxed"):
        if final_prompt not in ("boxed", "plain"):
            raise ValueError(f"final_prompt must be 'boxed' or 'plain', got {final_prompt!r}")
        self.tokenizer = tokenizer
        self.final_prompt = final_prompt
        self._memory = _compile(tokenizer, MEMORY_TEMPLATE)
        self._final = _compile(tokenizer, FINAL_TEMPLATE_BOXED if final_prompt == "boxed" else FINAL_TEMPLATE_PLAIN)
        self.initial_memory_ids: list[int] = tokenizer.encode(INITIAL_MEMORY, add_special_tokens=False)
        self._stop_ids = {i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None}

    def memory_prompt(self, question_ids: list[int], memory_ids: list[int], chunk_ids: list[int]) -> list[int]:
        return self._memory.build(prompt=question_ids, memory=memory_ids, chunk=chunk_ids)

    def final_prompt_ids(self, question_ids: list[int], memory_ids: list[int]) -> list[int]:
        return self._final.build(prompt=question_ids, memory=memory_ids)

    def memory_from_completion(self, completion_ids: list[int]) -> list[int]:
        """The next memory: the sampled ids with EOS and pad tokens removed."""
        return [i for i in completion_ids if i not in self._stop_ids]

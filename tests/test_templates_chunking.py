import numpy as np
import pytest

from trl_memagent.chunking import (
    chunk_document,
    split_text_blocks,
    stream_text_file,
    tokenize_document,
    truncate_center,
)
from trl_memagent.templates import (
    FINAL_TEMPLATE_BOXED,
    FINAL_TEMPLATE_PLAIN,
    INITIAL_MEMORY,
    MEMORY_TEMPLATE,
    PromptBuilder,
)
from trl_memagent.tiny import filler_text


def chat(tokenizer, text):
    messages = [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_prompt_strings_match_the_reference():
    assert MEMORY_TEMPLATE.startswith("You are presented with a problem, a section of an article")
    assert "<problem> \n{prompt}\n</problem>" in MEMORY_TEMPLATE
    assert MEMORY_TEMPLATE.endswith("</section>\n\nUpdated memory:\n")
    assert "put the answer in \\boxed{}." in FINAL_TEMPLATE_BOXED.format(prompt="q", memory="m")
    assert FINAL_TEMPLATE_PLAIN.count('"Therefore, the answer is (insert answer here)".') == 1
    assert FINAL_TEMPLATE_BOXED.endswith("</memory>\n\nYour answer:\n")
    assert INITIAL_MEMORY == "No previous memory"


@pytest.mark.parametrize("final_prompt", ["boxed", "plain"])
def test_token_space_prompts_decode_to_the_rendered_templates(tiny_tokenizer, final_prompt):
    builder = PromptBuilder(tiny_tokenizer, final_prompt)
    question, memory, chunk = "Where was the band founded?", "The band was founded in a city.", filler_text(40)
    encode = lambda text: tiny_tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    prompt = builder.memory_prompt(encode(question), encode(memory), encode(chunk))
    expected = chat(tiny_tokenizer, MEMORY_TEMPLATE.format(prompt=question, memory=memory, chunk=chunk))
    assert tiny_tokenizer.decode(prompt) == expected
    final = builder.final_prompt_ids(encode(question), builder.initial_memory_ids)
    template = FINAL_TEMPLATE_BOXED if final_prompt == "boxed" else FINAL_TEMPLATE_PLAIN
    rendered = template.format(prompt=question, memory=INITIAL_MEMORY)
    assert tiny_tokenizer.decode(final) == chat(tiny_tokenizer, rendered)


def test_memory_from_completion_drops_eos_and_pad(tiny_tokenizer):
    builder = PromptBuilder(tiny_tokenizer)
    eos, pad = tiny_tokenizer.eos_token_id, tiny_tokenizer.pad_token_id
    assert builder.memory_from_completion([5, 6, 7, eos, pad, pad]) == [5, 6, 7]


def test_unknown_final_prompt_is_rejected(tiny_tokenizer):
    with pytest.raises(ValueError, match="final_prompt"):
        PromptBuilder(tiny_tokenizer, "fancy")


def test_chunks_are_consecutive_token_slices():
    ids = np.arange(23, dtype=np.int32)
    chunks = chunk_document(ids, 5)
    assert [c.tolist() for c in chunks] == [list(range(k * 5, min(k * 5 + 5, 23))) for k in range(5)]
    assert chunk_document(np.zeros(0, dtype=np.int32), 5) == []


def test_center_truncation_keeps_head_and_tail():
    ids = np.arange(50, dtype=np.int32)
    chunks = chunk_document(ids, 10, max_chunks=2, truncation="center")
    assert np.concatenate(chunks).tolist() == list(range(10)) + list(range(40, 50))
    assert truncate_center(np.arange(7), 4).tolist() == [0, 1, 5, 6]
    with pytest.raises(ValueError, match="max_chunks"):
        chunk_document(ids, 10, max_chunks=2, truncation="error")


def test_block_tokenization_equals_whole_text_tokenization(tiny_tokenizer, tmp_path):
    text = filler_text(3000, seed=3) + "\n\nA  double  spaced tail.\nNew line 123 456."
    blocks = list(split_text_blocks(text, block_chars=500))
    assert len(blocks) > 10 and "".join(blocks) == text
    whole = tiny_tokenizer.encode(text, add_special_tokens=False)
    pieces = [i for block in blocks for i in tiny_tokenizer.encode(block, add_special_tokens=False)]
    assert pieces == whole
    assert tokenize_document(tiny_tokenizer, text).tolist() == whole
    path = tmp_path / "doc.txt"
    path.write_text(text, encoding="utf-8")
    streamed = list(stream_text_file(str(path), block_chars=700))
    assert len(streamed) > 5 and "".join(streamed) == text
    assert tokenize_document(tiny_tokenizer, iter(streamed)).tolist() == whole


def test_batched_tokenization_keeps_each_documents_blocks_together(tiny_tokenizer, monkeypatch):
    import trl_memagent.chunking as chunking

    monkeypatch.setattr(chunking, "BATCH_BLOCKS", 3)
    texts = [filler_text(400, seed=s) for s in (1, 2, 3)]
    streams = [list(split_text_blocks(t, block_chars=300)) for t in texts]  # several batches, straddling documents
    assert sum(len(s) for s in streams) > 3 * 3
    documents = [texts[0], iter(streams[1]), "", iter(streams[2])]
    got = chunking.tokenize_documents(tiny_tokenizer, documents)
    expected = [tiny_tokenizer.encode(t, add_special_tokens=False) for t in (texts[0], texts[1], "", texts[2])]
    assert [ids.tolist() for ids in got] == expected

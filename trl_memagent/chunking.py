"""Tokenizing long documents once, and cutting them into fixed-size token chunks."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

import numpy as np

Truncation = Literal["center", "error"]
# Text is tokenized in blocks of about this many characters so a multi-million-token document never
# holds the tokenizer's per-token offsets and strings for all of it at once.
BLOCK_CHARS = 1 << 18
BATCH_BLOCKS = 8  # blocks encoded per tokenizer call


def split_text_blocks(text: str, block_chars: int = BLOCK_CHARS) -> Iterator[str]:
    """Cut `text` into blocks at a single space between two non-space characters.

    Byte-level BPE pre-tokenizers (GPT-2, Qwen) attach a single space to the following word, so a cut
    right before such a space gives the same tokens as tokenizing the whole text.
    """
    start = 0
    while len(text) - start > block_chars:
        cut = start + block_chars
        while cut < len(text) - 1 and not (
            text[cut] == " " and not text[cut - 1].isspace() and not text[cut + 1].isspace()
        ):
            cut += 1
        if cut >= len(text) - 1:
            break
        yield text[start:cut]
        start = cut
    yield text[start:]


def tokenize_documents(tokenizer, documents: Sequence[str | Iterable[str]]) -> list[np.ndarray]:
    """Token ids (int32) of each document: a string, or an iterable of text blocks streamed from disk.

    Blocks of all documents are encoded a batch at a time (the fast tokenizer spreads a batch over its
    threads), and at most `BATCH_BLOCKS` blocks' encodings are alive at once, whatever the documents' size.
    """
    pieces: list[list[np.ndarray]] = [[] for _ in documents]
    blocks = (
        (index, block)
        for index, document in enumerate(documents)
        for block in (split_text_blocks(document) if isinstance(document, str) else document)
    )
    while batch := list(itertools.islice(blocks, BATCH_BLOCKS)):
        encoded = tokenizer([block for _, block in batch], add_special_tokens=False, return_attention_mask=False)
        for (index, _), ids in zip(batch, encoded["input_ids"], strict=True):
            pieces[index].append(np.asarray(ids, dtype=np.int32))
    return [np.concatenate(p) if p else np.zeros(0, dtype=np.int32) for p in pieces]


def tokenize_document(tokenizer, document: str | Iterable[str]) -> np.ndarray:
    """Token ids (int32) of one document; see `tokenize_documents`."""
    return tokenize_documents(tokenizer, [document])[0]


def truncate_center(ids: np.ndarray, max_tokens: int) -> np.ndarray:
    """Keep the first and last halves of `max_tokens`, as the reference training did."""
    if len(ids) <= max_tokens:
        return ids
    head = max_tokens // 2
    tail = max_tokens - head
    return np.concatenate([ids[:head], ids[len(ids) - tail :]]) if tail else ids[:head]


def chunk_document(
    ids: np.ndarray, chunk_tokens: int, max_chunks: int | None = None, truncation: Truncation = "center"
) -> list[np.ndarray]:
    """Consecutive slices `ids[k*C:(k+1)*C]` (views, no copies); the last one may be shorter."""
    if chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
    if max_chunks is not None and len(ids) > max_chunks * chunk_tokens:
        if truncation == "error":
            raise ValueError(
                f"document has {len(ids)} tokens, more than max_chunks * chunk_tokens = {max_chunks * chunk_tokens}; "
                "raise max_chunks or use truncation='center'"
            )
        if truncation != "center":
            raise ValueError(f"truncation must be 'center' or 'error', got {truncation!r}")
        ids = truncate_center(ids, max_chunks * chunk_tokens)
    return [ids[start : start + chunk_tokens] for start in range(0, len(ids), chunk_tokens)]


def stream_text_file(path: str, block_chars: int = BLOCK_CHARS) -> Iterator[str]:
    """Text blocks of a file of any size, each ending before a single space (see `split_text_blocks`)."""
    carry = ""
    with open(path, encoding="utf-8") as handle:
        while data := handle.read(block_chars):
            carry += data
            blocks = list(split_text_blocks(carry, block_chars))
            carry = blocks.pop()
            yield from blocks
    if carry:
        yield carry

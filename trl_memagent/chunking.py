"""Tokenizing long documents once, and cutting them into fixed-size token chunks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

import numpy as np

Truncation = Literal["center", "error"]
# Text is tokenized in blocks of about this many characters so a multi-million-token document never
# holds the tokenizer's per-token offsets and strings for all of it at once.
BLOCK_CHARS = 1 << 18


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


def tokenize_document(tokenizer, document: str | Iterable[str]) -> np.ndarray:
    """Token ids of a document (a string, or an iterable of text blocks streamed from disk) as int32."""
    blocks = split_text_blocks(document) if isinstance(document, str) else document
    pieces = [np.asarray(tokenizer.encode(block, add_special_tokens=False), dtype=np.int32) for block in blocks]
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)


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

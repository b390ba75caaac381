"""Offline haystacks and random keys/values for the synthetic RULER tasks.

RULER (NVIDIA/RULER, also vendored in BytedTsinghua-SIA/MemAgent `taskutils/memory_data/synthetic/`) reads
Paul Graham essays and `wonderwords` lists from the network; these built-in stand-ins need no download.
Any text file can replace the essay haystack.
"""

from __future__ import annotations

import random
import re
import string
import uuid
from collections.abc import Callable

from ..tiny import filler_text

# RULER's "repeat"/noise haystack, verbatim.
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."

_ADJECTIVES = (
    "amber ancient bold brave bright brisk calm clever cosmic crimson curious daring dusty eager early elegant "
    "fancy fierce fluffy frosty gentle giant golden graceful happy hidden humble icy jolly kind lively lucky "
    "magic mellow mighty misty modern noble odd orange patient plain polite proud quick quiet rapid rare "
    "rustic scarlet shiny silent silver simple sleepy smooth sober solid spicy steady stormy sunny swift tall "
    "tender tidy tiny velvet vivid warm wild wise witty young zesty"
).split()
_NOUNS = (
    "anchor apple arrow badge banjo barrel basket beacon bell blanket bottle bridge brush bucket button cabin "
    "camera candle canyon carpet castle cellar chair clock cloud comet compass cookie crystal curtain desk "
    "diamond dolphin drum eagle engine falcon feather fiddle forest fountain garden glacier guitar hammer "
    "harbor helmet island jacket kettle ladder lantern lemon lizard magnet marble meadow mirror needle ocean "
    "orchard otter paddle parrot pebble pencil piano pillow planet pocket puzzle rabbit ribbon rocket saddle "
    "shovel spoon statue tiger tower trumpet tunnel violin wagon whistle window"
).split()
_CONSONANTS = "bcdfghjklmnprstvz"
_VOWELS = "aeiou"


def random_word(rng: random.Random) -> str:
    """An adjective-noun pair such as `golden-lantern` (RULER's "words" keys and values)."""
    return f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"


def random_number(rng: random.Random, digits: int = 7) -> str:
    return str(rng.randint(10 ** (digits - 1), 10**digits - 1))


def random_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


VALUE_MAKERS: dict[str, Callable[[random.Random], str]] = {
    "words": random_word,
    "numbers": random_number,
    "uuids": random_uuid,
}


def pseudo_word(rng: random.Random) -> str:
    """A pronounceable made-up word of 2-4 syllables (the common-words vocabulary; ~10^6 distinct)."""
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(2, 4)))


def coded_word(rng: random.Random, length: int = 6) -> str:
    """RULER's frequent-words vocabulary: random lowercase strings."""
    return "".join(rng.choices(string.ascii_lowercase, k=length))


def unique_words(rng: random.Random, count: int, make: Callable[[random.Random], str], exclude=()) -> list[str]:
    """`count` distinct words from `make`, none in `exclude`."""
    seen = set(exclude)
    words: list[str] = []
    while len(words) < count:
        word = make(rng)
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def split_sentences(text: str) -> list[str]:
    """Sentences of a text with whitespace collapsed (the units of an essay haystack)."""
    text = re.sub(r"\s+", " ", text).strip()
    return [s for s in re.split(r"(?<=[.!?])\s+", text) if s]


class EssayHaystack:
    """Sentences of an essay-like text, indexable without bound (a short text is cycled).

    The default is the project's built-in word salad (`trl_memagent.tiny.filler_text`), generated on demand;
    `from_file` reads any user text instead.
    """

    def __init__(self, sentences: list[str] | None = None, seed: int = 0):
        self._fixed = sentences is not None
        if sentences is not None and not sentences:
            raise ValueError("an essay haystack needs at least one sentence")
        self._sentences = list(sentences or [])
        self._seed = seed

    @classmethod
    def from_file(cls, path: str) -> EssayHaystack:
        with open(path, encoding="utf-8") as f:
            sentences = split_sentences(f.read())
        if not sentences:
            raise ValueError(f"haystack file {path!r} holds no text")
        return cls(sentences)

    def sentences(self, count: int) -> list[str]:
        """The first `count` sentences (cycling a user text that is too short)."""
        if self._fixed:
            size = len(self._sentences)
            return [self._sentences[i % size] for i in range(count)]
        if count > len(self._sentences):
            # filler_text is prefix-stable: more words extend the same sentence sequence.
            words = 12 * max(count, 2 * len(self._sentences), 256)
            self._sentences = split_sentences(filler_text(words, seed=self._seed))
        return self._sentences[:count]

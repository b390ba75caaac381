"""A tiny Qwen2 model and a ChatML tokenizer built on the spot, with no download.

They are the embedded default of the README's main job, of the tests and of the CPU benchmarks:
everything in the project runs offline on a laptop with them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from .templates import FINAL_TEMPLATE_BOXED, FINAL_TEMPLATE_PLAIN, MEMORY_TEMPLATE

# Qwen2.5's template, reduced to what a memory agent uses: a default system prompt and ChatML turns.
CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_WORDS = (
    "the of and to in is was for on as with by at from his her that which this are an be had it were not "
    "city river born film album band team king war year country state music novel director actor company "
    "founded located known named member played first second largest university village district season "
    "memory problem answer section article document question key value number word yes no boxed"
).split()


def filler_text(num_words: int, seed: int = 0) -> str:
    """Deterministic word salad: a haystack for tests and demos that needs no download."""
    rng = random.Random(seed)
    words = [rng.choice(_WORDS) for _ in range(num_words)]
    sentences = [" ".join(words[i : i + 12]).capitalize() + "." for i in range(0, len(words), 12)]
    return " ".join(sentences)


def build_tiny_tokenizer(vocab_size: int = 512, extra_corpus: Iterable[str] = ()) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer with a ChatML chat template (Qwen's special tokens)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [MEMORY_TEMPLATE, FINAL_TEMPLATE_BOXED, FINAL_TEMPLATE_PLAIN, filler_text(5000), *extra_corpus]
    corpus += ["0123456789 " * 4, "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"]
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=1_000_000_000,
    )


def build_tiny_model(tokenizer: PreTrainedTokenizerFast, hidden_size: int = 64, num_layers: int = 2, seed: int = 0):
    """A randomly initialised Qwen2 decoder sized for CPU tests."""
    import torch

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_tiny_model(path: str, hidden_size: int = 64, num_layers: int = 2, seed: int = 0) -> str:
    """Build and save a tiny model and its tokenizer to `path`, loadable with `from_pretrained`."""
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, hidden_size=hidden_size, num_layers=num_layers, seed=seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


if __name__ == "__main__":
    import sys

    print(save_tiny_model(sys.argv[1] if len(sys.argv) > 1 else "tiny-memagent"))

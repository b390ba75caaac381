"""The embedded default: a tiny model built on the spot reads a generated long document, memory trace printed.

Runs anywhere in seconds, with no download. The model is random, so its memories are noise: the point is
to see the workflow (fixed-size memory rewritten chunk by chunk, answer from the final memory alone).
"""

import argparse
import os

from trl_memagent.cli import main as cli_main
from trl_memagent.tiny import filler_text, save_tiny_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", default="outputs/demo")
    parser.add_argument("--num-words", type=int, default=20000, help="Length of the generated document.")
    args = parser.parse_args()
    os.makedirs(args.output_dir, exist_ok=True)
    model_dir = save_tiny_model(os.path.join(args.output_dir, "tiny-model"))
    words = filler_text(args.num_words, seed=1).split(" ")
    words.insert(len(words) * 2 // 3, "The secret city is Paris.")
    document = os.path.join(args.output_dir, "document.txt")
    with open(document, "w", encoding="utf-8") as handle:
        handle.write(" ".join(words))
    cli_main(
        ["answer", "--model", model_dir, "--document", document, "--question", "What is the secret city?"]
        + ["--chunk-tokens", "2048", "--memory-tokens", "64", "--answer-tokens", "32", "--show-memory"]
    )


if __name__ == "__main__":
    main()

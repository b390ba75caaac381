"""The main job on the embedded default: train a tiny memory agent on CPU, evaluate it, write it with its card.

    python scripts/train_tiny.py [--output-dir outputs/tiny-memagent] [--any_recipe_field value ...]

Runs `trl-memagent train --config recipes/tiny-cpu.yaml` (the same code path): it builds the tiny model and
tokenizer (`trl_memagent.tiny`) under the output directory, generates synthetic RULER data with them, trains
with multi-conversation GRPO, saves the checkpoint, evaluates it with the evaluation harness at two lengths
and writes the model card with the table and the plot. Then it loads the checkpoint back with
`from_pretrained`, parses the card with `huggingface_hub`, and runs `trl-memagent answer` on a generated
document. Offline, no GPU, a few minutes on 2 CPU cores.
"""

import argparse
import json
import os
import sys
import time

RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recipes", "tiny-cpu.yaml")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="outputs/tiny-memagent", help="Where the checkpoint goes.")
    parser.add_argument("--recipe", default=os.path.normpath(RECIPE), help="The recipe to train with.")
    args, overrides = parser.parse_known_args(argv)
    start = time.perf_counter()

    from huggingface_hub import ModelCard
    from transformers import AutoModelForCausalLM

    from trl_memagent.cli import main as cli_main
    from trl_memagent.model_card import CONTEXT_FILE, EVAL_DIR
    from trl_memagent.tiny import filler_text
    from trl_memagent.train_cli import main as train_main

    code = train_main(["--config", args.recipe, "--output_dir", args.output_dir, *overrides])
    if code != 0:
        return code
    trained = time.perf_counter() - start
    out = args.output_dir

    model = AutoModelForCausalLM.from_pretrained(out)
    card = ModelCard.load(os.path.join(out, "README.md"))
    with open(os.path.join(out, CONTEXT_FILE), encoding="utf-8") as handle:
        memory = json.load(handle)["memory"]
    document = os.path.join(out, "_document.txt")
    words = filler_text(400, seed=3).split(" ")
    words.insert(len(words) // 2, "The special magic number for the harbour is 4417.")
    with open(document, "w", encoding="utf-8") as handle:
        handle.write(" ".join(words))
    print("\n=== trl-memagent answer on the trained checkpoint ===")
    cli_main(
        ["answer", "--model", out, "--document", document, "--question", "What is the special magic number?"]
        + ["--chunk-tokens", str(memory["chunk_tokens"]), "--memory-tokens", str(memory["memory_tokens"])]
        + ["--answer-tokens", str(memory["answer_tokens"]), "--final-prompt", memory["final_prompt"]]
    )

    print(f"\n=== {out} ===")
    for root, dirs, files in os.walk(out):
        dirs.sort()
        depth = os.path.relpath(root, out).count(os.sep) + (root != out)
        if depth > 1:
            continue
        for name in sorted(files):
            path = os.path.join(root, name)
            print(f"  {os.path.relpath(path, out):<40} {os.path.getsize(path):>12,} bytes")
    with open(os.path.join(out, EVAL_DIR, "summary.md"), encoding="utf-8") as handle:
        print("\n" + handle.read())
    print(
        f"checkpoint: {out} ({type(model).__name__}, {model.num_parameters():,} parameters, loads with "
        f"from_pretrained); card metadata: {card.data.to_dict()}"
    )
    print(f"main job done in {time.perf_counter() - start:.0f}s (training + evaluation + card: {trained:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

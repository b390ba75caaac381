"""`trl-memagent`: run a memory agent over a document, build data, evaluate, train."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Subcommands that live in their own modules, each with a `main(argv) -> int`.
_DELEGATED = {
    "build-data": ("trl_memagent.data.cli", "Build RULER-HQA, synthetic RULER tasks; validate custom data."),
    "eval": ("trl_memagent.evaluation.cli", "Evaluate a memory agent (or a long-context baseline) across lengths."),
    "train": ("trl_memagent.train_cli", "Train with MultiConvGRPOTrainer from a TRL-style YAML recipe."),
}


def load_agent_backend(args: argparse.Namespace):
    """The tokenizer and backend that `answer` (and the eval harness) use: a server if `--base-url`, else local."""
    from transformers import AutoTokenizer

    from .backends import OpenAIBackend, TransformersBackend

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    if args.base_url:
        backend = OpenAIBackend(
            args.base_url,
            args.model,
            tokenizer,
            api_key=args.api_key or os.environ.get("OPENAI_API_KEY"),
            temperature=args.temperature,
            top_p=args.top_p,
            max_concurrency=args.max_concurrency,
        )
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype="auto", device_map=args.device)
        backend = TransformersBackend(
            model.eval(), tokenizer, temperature=args.temperature, top_p=args.top_p, do_sample=args.temperature > 0
        )
    return tokenizer, backend


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, help="Local directory or Hub id; with --base-url, the served model name."
    )
    parser.add_argument("--tokenizer", help="Tokenizer directory or Hub id (default: --model).")
    parser.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (`vllm serve`).")
    parser.add_argument("--api-key", help="API key for --base-url (default: $OPENAI_API_KEY).")
    parser.add_argument("--max-concurrency", type=int, default=16, help="Requests in flight to --base-url.")
    parser.add_argument("--device", default=None, help="device_map for a local model (e.g. 'cpu', 'cuda', 'auto').")
    parser.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature (0: greedy, local only).")
    parser.add_argument("--top-p", type=float, default=0.95, help="Nucleus sampling threshold.")


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chunk-tokens", type=int, default=5000, help="Document tokens per memory update.")
    parser.add_argument("--memory-tokens", type=int, default=1024, help="Maximum tokens of the memory.")
    parser.add_argument("--answer-tokens", type=int, default=1024, help="Maximum tokens of the final answer.")
    parser.add_argument("--final-prompt", choices=["boxed", "plain"], default="boxed", help="Final-answer template.")


def memory_config(args: argparse.Namespace):
    from .rollout import MemoryAgentConfig

    return MemoryAgentConfig(
        chunk_tokens=args.chunk_tokens,
        memory_tokens=args.memory_tokens,
        answer_tokens=args.answer_tokens,
        final_prompt=args.final_prompt,
    )


def print_trajectory(trajectory, show_memory: bool, file=None) -> None:
    file = file or sys.stdout
    if show_memory:
        for k, memory in enumerate(trajectory.memories):
            print(f"--- memory after chunk {k + 1}/{len(trajectory.memories)} ---\n{memory}", file=file)
        print("--- answer ---", file=file)
    print(trajectory.answer, file=file)


def answer_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="trl-memagent answer", description="Answer a question about a document of any length with a memory agent."
    )
    add_backend_arguments(parser)
    add_memory_arguments(parser)
    parser.add_argument("--document", required=True, help="Text file to read (streamed from disk; any size).")
    parser.add_argument("--question", required=True, help="The question to answer.")
    parser.add_argument("--show-memory", action="store_true", help="Print the memory after every chunk.")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.document):
        parser.error(f"--document {args.document!r} is not a file")

    from .chunking import stream_text_file
    from .rollout import MemoryAgent

    tokenizer, backend = load_agent_backend(args)
    agent = MemoryAgent(backend, tokenizer, memory_config(args))
    (trajectory,) = agent.run([args.question], [stream_text_file(args.document)], progress=True)
    print_trajectory(trajectory, args.show_memory)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {
        "answer": "Answer a question about a long document with a memory agent.",
        **{name: help_text for name, (_, help_text) in _DELEGATED.items()},
    }
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        usage = (
            "usage: trl-memagent {"
            + ",".join(commands)
            + "} ...\n\n"
            + "\n".join(f"  {name:<12} {text}" for name, text in commands.items())
        )
        if argv and argv[0] not in ("-h", "--help"):
            print(f"trl-memagent: unknown command {argv[0]!r}\n{usage}", file=sys.stderr)
            return 2
        print(usage)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "answer":
        return answer_main(rest)
    module = importlib.import_module(_DELEGATED[command][0])
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())

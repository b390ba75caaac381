"""`trl-memagent eval {run,probe,summarize,plot}`: evaluate across lengths, probe positions, tabulate, plot."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..cli import add_backend_arguments, add_memory_arguments, load_agent_backend, memory_config


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    add_backend_arguments(parser)
    add_memory_arguments(parser)
    parser.add_argument("--output-dir", required=True, help="Where results.jsonl, summary and plot go (resumable).")
    parser.add_argument("--mode", choices=["agent", "baseline"], default="agent", help="Memory agent or baseline.")
    parser.add_argument(
        "--window", type=int, default=32768, help="Baseline: prompt + answer tokens (documents cut in the middle)."
    )
    parser.add_argument("--name", help="Label in tables and plots (default: model name and mode).")
    parser.add_argument("--batch-size", type=int, help="Samples per group (default: 1 with --base-url, else 8).")
    parser.add_argument("--workers", type=int, help="Groups in flight (default: server: --max-concurrency, else 1).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of local sampling (per group of ids).")
    parser.add_argument("--limit", type=int, help="Evaluate only the first N samples of each input.")
    parser.add_argument(
        "--memory-trace", choices=["full", "last", "none"], default="full", help="Memories stored per sample."
    )
    parser.add_argument("--metric", choices=["auto", "qa", "ruler"], default="auto", help="Scoring rule.")
    parser.add_argument("--no-plot", action="store_true", help="Do not draw accuracy.png.")


def _eval_config(args: argparse.Namespace):
    from .harness import EvalConfig

    return EvalConfig(
        mode=args.mode,
        name=args.name or os.path.basename(os.path.normpath(args.model)),
        batch_size=args.batch_size,
        workers=args.workers,
        seed=args.seed,
        baseline_window=args.window,
        memory_trace=args.memory_trace,
        metric=args.metric,
        max_samples=args.limit,
        plot=not args.no_plot,
    )


def _evaluate(args: argparse.Namespace, data):
    from .harness import evaluate

    tokenizer, backend = load_agent_backend(args)
    try:
        return evaluate(backend, tokenizer, data, args.output_dir, _eval_config(args), memory_config(args))
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: finished samples are saved in {args.output_dir}; rerun the same command to resume",
            file=sys.stderr,
        )
        sys.stderr.flush()
        sys.stdout.flush()
        # Worker threads may still wait on the server; their samples were not saved and will be rerun.
        os._exit(130)


def run_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="trl-memagent eval run",
        description="Evaluate a memory agent (or the whole-document baseline) on eval files; rerun to resume.",
    )
    parser.add_argument("--data", nargs="+", required=True, help="Eval files (.parquet, .jsonl, .json).")
    _add_run_arguments(parser)
    args = parser.parse_args(argv)
    for path in args.data:
        if not os.path.isfile(path):
            parser.error(f"--data {path!r} is not a file")
    result = _evaluate(args, args.data)
    return 0 if result.summary["overall"]["failed"] == 0 else 1


def probe_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="trl-memagent eval probe",
        description="Position probe: HotpotQA gold paragraphs at chosen pairs of relative depths.",
    )
    parser.add_argument("--hotpotqa", required=True, help="HotpotQA distractor file or Hub name.")
    parser.add_argument("--num-docs", type=int, default=200, help="Documents per sample (200 ~ 28K tokens).")
    parser.add_argument(
        "--depths",
        nargs="+",
        default=["0,0", "0,0.5", "0,1", "0.5,0.5", "0.5,1", "1,1"],
        help="Depth pairs 'd1,d2' in [0, 1] for the two gold paragraphs.",
    )
    parser.add_argument("--num-questions", type=int, default=32, help="Questions per depth pair.")
    _add_run_arguments(parser)
    args = parser.parse_args(argv)
    try:
        pairs = [tuple(float(d) for d in pair.split(",")) for pair in args.depths]
    except ValueError:
        parser.error(f"--depths must be pairs like 0,0.5; got {args.depths}")

    from .harness import RESULTS_FILE
    from .probe import build_position_probe, probe_grid
    from .store import read_records

    data = build_position_probe(args.hotpotqa, args.num_docs, pairs, args.num_questions, args.seed, progress=True)
    _evaluate(args, {f"probe_{args.num_docs}": data})
    grid = probe_grid(list(read_records(os.path.join(args.output_dir, RESULTS_FILE))))
    with open(os.path.join(args.output_dir, "probe.md"), "w", encoding="utf-8") as handle:
        handle.write(grid)
    print(grid)
    return 0


def summarize_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="trl-memagent eval summarize", description="Summary tables of evaluation directories (also mid-run)."
    )
    parser.add_argument("dirs", nargs="+", help="Output directories of `trl-memagent eval run`.")
    parser.add_argument("--json", action="store_true", help="Print JSON instead of Markdown.")
    args = parser.parse_args(argv)

    from .harness import RESULTS_FILE, RUN_FILE
    from .metrics import summarize, summary_markdown
    from .store import latest_by_id, read_records

    for directory in args.dirs:
        results = os.path.join(directory, RESULTS_FILE)
        if not os.path.isfile(results):
            parser.error(f"{directory!r} has no {RESULTS_FILE}")
        run = {}
        if os.path.isfile(os.path.join(directory, RUN_FILE)):
            with open(os.path.join(directory, RUN_FILE), encoding="utf-8") as handle:
                run = json.load(handle)
        records = list(latest_by_id(read_records(results)).values())
        summary = summarize(records, name=run.get("name", directory), mode=run.get("mode", ""))
        print(json.dumps(summary, indent=2) if args.json else summary_markdown(summary))
    return 0


def plot_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="trl-memagent eval plot",
        description="Accuracy vs document length of several runs, with the paper's RULER-HQA curves dashed.",
    )
    parser.add_argument("dirs", nargs="+", help="Output directories (each with summary.json).")
    parser.add_argument("--output", "-o", required=True, help="PNG file to write.")
    parser.add_argument("--paper-models", nargs="*", help="Paper curves to draw (default: the four headline ones).")
    parser.add_argument("--title", default="Accuracy vs document length", help="Plot title.")
    args = parser.parse_args(argv)

    from .harness import SUMMARY_JSON
    from .plots import PAPER_MODELS, MissingMatplotlib, plot_accuracy

    summaries = []
    for directory in args.dirs:
        path = os.path.join(directory, SUMMARY_JSON)
        if not os.path.isfile(path):
            parser.error(f"{directory!r} has no {SUMMARY_JSON} (run `trl-memagent eval run` first)")
        with open(path, encoding="utf-8") as handle:
            summaries.append(json.load(handle))
    models = PAPER_MODELS if args.paper_models is None else args.paper_models
    try:
        plot_accuracy(summaries, args.output, paper_models=models, title=args.title)
    except MissingMatplotlib as error:
        print(f"trl-memagent eval plot: {error}", file=sys.stderr)
        return 1
    print(args.output)
    return 0


COMMANDS = {
    "run": (run_main, "Evaluate a model on eval files (memory agent or baseline); resumable."),
    "probe": (probe_main, "Position probe: accuracy by the depths of the two gold paragraphs."),
    "summarize": (summarize_main, "Print the summary tables of evaluation directories."),
    "plot": (plot_main, "Plot accuracy vs length of several runs with the paper's curves."),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        usage = "usage: trl-memagent eval {" + ",".join(COMMANDS) + "} ...\n\n"
        usage += "\n".join(f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items())
        if argv and argv[0] not in ("-h", "--help"):
            print(f"trl-memagent eval: unknown command {argv[0]!r}\n{usage}", file=sys.stderr)
            return 2
        print(usage)
        return 0
    return COMMANDS[argv[0]][0](argv[1:])


if __name__ == "__main__":
    sys.exit(main())

"""`trl-memagent build-data {ruler-hqa,ruler,filter,validate} ...`"""

from __future__ import annotations

import argparse
import sys

from ..cli import add_backend_arguments
from .hotpotqa import INDEX_ONLY_ABOVE, PAPER_LADDER, REFERENCE_SHUFFLE_SEED
from .ruler import OFFLINE_TASKS, RULER_TASKS


def _load_tokenizer(name: str):
    if name == "tiny":
        from ..tiny import build_tiny_tokenizer

        return build_tiny_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def _ruler_hqa(args: argparse.Namespace) -> int:
    from .hotpotqa import build_ruler_hqa
    from .io import load_file

    ids = None
    if args.ids_from:
        ids = [str(i) for i in load_file(args.ids_from, columns=["id"])["id"]]
    paths = build_ruler_hqa(
        args.source,
        args.out_dir,
        num_docs=args.num_docs,
        num_questions=args.num_questions or None,
        ids=ids,
        placement=args.placement,
        seed=args.seed,
        shuffle_seed=args.shuffle_seed,
        output_format=args.format,
        index_only_above=None if args.index_only_above < 0 else args.index_only_above,
        split=args.split,
        config=args.config,
    )
    print("\n".join(paths))
    return 0


def _ruler(args: argparse.Namespace) -> int:
    from .ruler import RulerConfig, write_ruler_ladder

    config = RulerConfig(
        tasks=args.tasks,
        target_tokens=args.lengths,
        num_samples=args.num_samples,
        seed=args.seed,
        haystack_file=args.haystack_file,
        squad_file=args.squad_file,
        hotpotqa_file=args.hotpotqa_file,
        depths=args.depths,
    )
    paths = write_ruler_ladder(_load_tokenizer(args.tokenizer), args.out_dir, config, output_format=args.format)
    print("\n".join(paths))
    return 0


def _filter(args: argparse.Namespace) -> int:
    from ..cli import load_agent_backend
    from .filtering import FilterConfig, filter_file

    tokenizer, backend = load_agent_backend(args)
    config = FilterConfig(
        num_samples=args.num_samples, max_tokens=args.max_tokens, batch_questions=args.batch_questions
    )
    report = filter_file(
        args.input, args.output, backend, tokenizer, sidecar=args.sidecar, config=config, max_kept=args.max_kept
    )
    print(report)
    print(args.output)
    return 0


def _validate(args: argparse.Namespace) -> int:
    from .custom import DataValidationError, load_memagent_dataset

    try:
        dataset = load_memagent_dataset(args.file, split=args.split, name=args.name)
    except (DataValidationError, FileNotFoundError, ValueError) as error:
        print(f"invalid: {error}", file=sys.stderr)
        return 1
    print(f"{args.file}: {len(dataset)} rows, valid (columns: {', '.join(dataset.column_names)})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-memagent build-data", description="Build RULER-HQA and synthetic RULER data; filter; validate."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help_text, formatter_class=argparse.ArgumentDefaultsHelpFormatter)

    hqa = add("ruler-hqa", "HotpotQA questions in contexts of N documents (the paper's ladder).")
    hqa.add_argument("--source", required=True, help="HotpotQA distractor JSON/JSONL/Parquet file, or a Hub name.")
    hqa.add_argument("--split", default="validation", help="Hub split (Hub sources only).")
    hqa.add_argument("--config", default="distractor", help="Hub configuration (Hub sources only).")
    hqa.add_argument("--out-dir", required=True, help="Output directory: ruler_hqa_{N}.{format} (+ pool.parquet).")
    hqa.add_argument(
        "--num-docs", type=int, nargs="+", default=list(PAPER_LADDER), help="Documents per sample (default: ladder)."
    )
    hqa.add_argument("--num-questions", type=int, default=128, help="Questions per set (0: all).")
    hqa.add_argument("--ids-from", help="Build only these question ids, in order (a file with an `id` column).")
    hqa.add_argument("--placement", choices=["reference", "random"], default="reference", help="Document order.")
    hqa.add_argument("--seed", type=int, default=0, help="Seed of the distractor draws (and of `random` order).")
    hqa.add_argument(
        "--shuffle-seed", type=int, default=REFERENCE_SHUFFLE_SEED, help="Order seed of `reference` placement."
    )
    hqa.add_argument("--format", choices=["parquet", "jsonl"], default="parquet", help="Output file format.")
    hqa.add_argument(
        "--index-only-above",
        type=int,
        default=INDEX_ONLY_ABOVE,
        help="Store document indices instead of text above this many documents (-1: never).",
    )
    hqa.set_defaults(run=_ruler_hqa)

    ruler = add("ruler", "Synthetic RULER tasks fitted to token lengths (offline).")
    ruler.add_argument("--tokenizer", required=True, help="Tokenizer directory or Hub id ('tiny': built-in).")
    ruler.add_argument("--out-dir", required=True, help="Output directory: {task}_{length}.{format}.")
    ruler.add_argument("--tasks", nargs="+", default=list(OFFLINE_TASKS), choices=list(RULER_TASKS), help="Tasks.")
    ruler.add_argument("--lengths", type=int, nargs="+", default=[8192], help="Target context lengths in tokens.")
    ruler.add_argument("--num-samples", type=int, default=128, help="Samples per task and length.")
    ruler.add_argument("--seed", type=int, default=0, help="Base seed.")
    ruler.add_argument("--haystack-file", help="Text file replacing the built-in essay-like haystack.")
    ruler.add_argument("--squad-file", help="SQuAD JSON (for qa_1).")
    ruler.add_argument("--hotpotqa-file", help="HotpotQA distractor JSON (for qa_2).")
    ruler.add_argument("--depths", type=float, nargs="+", help="Needle depths in [0, 1], cycled over samples.")
    ruler.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="Output file format.")
    ruler.set_defaults(run=_ruler)

    filt = add("filter", "Drop questions a model answers without the document (resumable).")
    add_backend_arguments(filt)
    filt.set_defaults(temperature=1.0, top_p=0.7)  # the paper's filter sampling
    filt.add_argument("--input", required=True, help="Custom-format or RULER-HQA file (.parquet/.jsonl/.json).")
    filt.add_argument("--output", required=True, help="Where to write the kept rows (same columns).")
    filt.add_argument("--sidecar", help="Decisions file to resume from (default: OUTPUT.decisions.jsonl).")
    filt.add_argument("--num-samples", type=int, default=2, help="Samples per question.")
    filt.add_argument("--max-tokens", type=int, default=512, help="New tokens per sample.")
    filt.add_argument("--batch-questions", type=int, default=64, help="Questions per backend call.")
    filt.add_argument("--max-kept", type=int, help="Keep at most this many rows (the first ones kept).")
    filt.set_defaults(run=_filter)

    val = add("validate", "Check a dataset against the custom format.")
    val.add_argument("file", help="Parquet/JSONL/JSON file or Hub dataset name.")
    val.add_argument("--split", default="train", help="Split (Hub datasets).")
    val.add_argument("--name", help="Configuration (Hub datasets).")
    val.set_defaults(run=_validate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return args.run(args)

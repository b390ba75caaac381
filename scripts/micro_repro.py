"""One command for the micro reproduction of MemAgent's RL ablation (docs/micro_repro.md).

python scripts/micro_repro.py            # full run: table and plot in docs/, figures in benchmarks/results/
python scripts/micro_repro.py --reduced  # the CI-sized version (a few minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from trl_memagent.repro.experiment import ExperimentConfig, run_experiment  # noqa: E402
from trl_memagent.repro.report import markdown_table, plot, update_doc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reduced", action="store_true", help="Run the CI-sized version.")
    parser.add_argument(
        "--output-dir",
        default=os.path.join(tempfile.gettempdir(), "micro_repro"),
        help="Checkpoints and evaluation records (default: micro_repro in the system's temporary directory).",
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="RL seeds (default: the config's).")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads.")
    parser.add_argument(
        "--results", help="Results JSON (default: benchmarks/results/micro_repro[_reduced].json in the repository)."
    )
    parser.add_argument(
        "--docs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Write docs/micro_repro.png and the table of docs/micro_repro.md (default: full run only).",
    )
    args = parser.parse_args(argv)

    config = ExperimentConfig.reduced() if args.reduced else ExperimentConfig()
    config.threads = args.threads
    if args.seeds:
        config.seeds = tuple(args.seeds)
    suffix = "_reduced" if args.reduced else ""
    results_path = args.results or os.path.join(ROOT, "benchmarks", "results", f"micro_repro{suffix}.json")
    start = time.perf_counter()
    results = run_experiment(config, args.output_dir)
    print(markdown_table(results))
    print(f"total wall time: {time.perf_counter() - start:.0f} s")
    os.makedirs(os.path.dirname(results_path), exist_ok=True)
    shutil.copyfile(os.path.join(args.output_dir, "results.json"), results_path)
    if args.docs if args.docs is not None else not args.reduced:
        plot(results, os.path.join(ROOT, "docs", "micro_repro.png"))
        update_doc(os.path.join(ROOT, "docs", "micro_repro.md"), results)
    print(json.dumps({"results": results_path}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

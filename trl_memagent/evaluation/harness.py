"""Run an evaluation: a memory agent (or the long-context baseline) over eval samples, resumable.

Concurrency: samples are processed in groups of `batch_size`; each group is one `MemoryAgent.run` (so a
local model batches the group's conversations of every turn into one `generate`), and `workers` groups run
at a time on threads. A server backend defaults to groups of one sample and as many workers as its
`max_concurrency`: each sample reads its chunks in order and at most `workers` requests are in flight. A
local model defaults to groups of 8 run one after the other.

Durability: each group's records are appended to `results.jsonl` (one write + fsync) as soon as the group
ends. A rerun skips finished ids and retries failed ones. A `BackendError` (server down, request refused)
marks the samples of its group failed, with the error; failed samples are never scored.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from tqdm.auto import tqdm

from ..backends import BackendError, Generation, GenerationBackend, OpenAIBackend, TransformersBackend
from ..rollout import MemoryAgent, MemoryAgentConfig
from .baseline import BASELINE_ANSWER_TEMPLATE, BaselinePrompter, run_baseline
from .cost import cost_report, cost_text
from .metrics import length_label, metric_kind, score_answer, summarize, summary_markdown
from .store import FAILED, OK, ResultsStore

RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
COST_FILE = "cost.json"
PLOT_FILE = "accuracy.png"


@dataclass
class EvalConfig:
    """How to run an evaluation (the agent's sizes are a separate `MemoryAgentConfig`)."""

    mode: Literal["agent", "baseline"] = field(
        default="agent",
        metadata={"help": "'agent': the memory agent; 'baseline': the whole document in one prompt, middle cut."},
    )
    name: str = field(default="model", metadata={"help": "Label of this run in tables and plots."})
    batch_size: int | None = field(
        default=None,
        metadata={"help": "Samples per group (one agent run). Default: 1 for a server backend, 8 for a local model."},
    )
    workers: int | None = field(
        default=None,
        metadata={"help": "Groups in flight at once. Default: the server backend's max_concurrency, else 1."},
    )
    seed: int = field(
        default=0,
        metadata={"help": "Seed of local sampling, applied per group from the group's ids (reruns repeat samples)."},
    )
    baseline_window: int = field(
        default=32768, metadata={"help": "Baseline only: prompt + answer tokens; longer documents lose their middle."}
    )
    memory_trace: Literal["full", "last", "none"] = field(
        default="full",
        metadata={"help": "Memories stored per record: all, the last, or none (3.5M tokens = 700 memories)."},
    )
    metric: Literal["auto", "qa", "ruler"] = field(
        default="auto",
        metadata={"help": "Scoring: 'auto' picks RULER string match for niah/vt/cwe/fwe tasks, QA metrics otherwise."},
    )
    max_samples: int | None = field(
        default=None, metadata={"help": "Evaluate only the first N samples of each input (None: all)."}
    )
    plot: bool = field(default=True, metadata={"help": "Draw accuracy.png (needs matplotlib, else a warning)."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})

    def __post_init__(self):
        if self.mode not in ("agent", "baseline"):
            raise ValueError(f"mode must be 'agent' or 'baseline', got {self.mode!r}")
        if self.memory_trace not in ("full", "last", "none"):
            raise ValueError(f"memory_trace must be 'full', 'last' or 'none', got {self.memory_trace!r}")
        if self.metric not in ("auto", "qa", "ruler"):
            raise ValueError(f"metric must be 'auto', 'qa' or 'ruler', got {self.metric!r}")
        for name in ("batch_size", "workers", "max_samples"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive or None, got {value}")
        if self.baseline_window <= 0:
            raise ValueError(f"baseline_window must be positive, got {self.baseline_window}")


@dataclass
class EvalItem:
    """One sample to evaluate: its metadata, and where to read its (possibly huge) document when its turn comes."""

    id: str
    task: str
    question: str
    answers: list[str]
    length: str
    num_docs: int | None
    target_tokens: int | None
    doc_tokens: int | None
    extra: dict[str, Any]
    rows: Any = field(repr=False)
    row: int = 0

    def expected(self) -> dict:
        return {k: getattr(self, k) for k in ("id", "task", "length", "num_docs", "target_tokens", "doc_tokens")}


@dataclass
class EvalResult:
    """What `evaluate` returns: the summary, the cost report, the records and where the files are."""

    summary: dict
    cost: dict
    records: list[dict]
    output_dir: str

    @property
    def accuracy(self) -> float | None:
        return self.summary["overall"]["accuracy"]


# ----------------------------------------------------------------------------------------------------------
# Inputs


def load_eval_items(data, max_samples: int | None = None) -> list[EvalItem]:
    """Eval samples from files, datasets or row lists, in order.

    `data` is a path or a list of paths (`.parquet`, `.jsonl`, `.json`, read with `load_memagent_dataset`),
    a `datasets.Dataset` or a list of row dicts, or a mapping name -> any of those. Rows follow the custom
    format (`prompt`, `context`, `answers`, optional `id`, `task`, `num_docs`, `target_tokens`, `num_tokens`).
    Sample ids are `{source}/{row id}` (source: the file stem or mapping key, `data` for a lone dataset).
    """
    from ..data.custom import validate_dataset

    if isinstance(data, str | os.PathLike):
        data = [os.fspath(data)]
    if isinstance(data, Mapping):
        sources = list(data.items())
    elif isinstance(data, Sequence) and data and all(isinstance(d, str | os.PathLike) for d in data):
        sources = [(os.path.splitext(os.path.basename(os.fspath(p)))[0], os.fspath(p)) for p in data]
    else:
        sources = [("data", data)]
    items: list[EvalItem] = []
    seen: dict[str, str] = {}
    for source, value in sources:
        rows = _as_dataset(value)
        if not isinstance(value, str):
            validate_dataset(rows, source=source)
        for item in _items_of(source, rows, max_samples):
            if item.id in seen:
                raise ValueError(
                    f"duplicate sample id {item.id!r} ({seen[item.id]} and {source}); give every row a unique 'id'"
                )
            seen[item.id] = source
            items.append(item)
    if not items:
        raise ValueError("no samples to evaluate")
    return items


def _as_dataset(value):
    import datasets

    from ..data.custom import load_memagent_dataset

    if isinstance(value, str | os.PathLike):
        return load_memagent_dataset(os.fspath(value))
    if isinstance(value, datasets.Dataset):
        return value
    if isinstance(value, Sequence) and all(isinstance(row, Mapping) for row in value):
        return datasets.Dataset.from_list([dict(row) for row in value])
    raise TypeError(
        f"cannot evaluate a {type(value).__name__}: pass file paths, a datasets.Dataset, a list of row dicts, "
        "or a mapping name -> one of those"
    )


def _items_of(source: str, rows, max_samples: int | None) -> list[EvalItem]:
    from ..data.custom import question_text

    metadata = rows.with_format(None)
    columns = [c for c in metadata.column_names if c not in ("context", "doc_indices")]
    count = len(rows) if max_samples is None else min(max_samples, len(rows))
    items = []
    for index, row in enumerate(metadata.select_columns(columns).select(range(count))):
        num_docs, target = row.get("num_docs"), row.get("target_tokens")
        task = row.get("task") or ("ruler_hqa" if num_docs is not None else source)
        doc_tokens = row.get("num_tokens")
        extra = {k: row[k] for k in ("depths", "gold_docs") if row.get(k) is not None}
        items.append(
            EvalItem(
                id=f"{source}/{row['id'] if row.get('id') is not None else index}",
                task=task,
                question=question_text(row["prompt"]),
                answers=list(row["answers"]),
                length=length_label(num_docs, target, doc_tokens) if (num_docs or target or doc_tokens) else "all",
                num_docs=num_docs,
                target_tokens=target,
                doc_tokens=doc_tokens,
                extra=extra,
                rows=rows,
                row=index,
            )
        )
    return items


# ----------------------------------------------------------------------------------------------------------
# Running one group


class _MeteredBackend:
    """Counts the backend calls of one group (each group has its own, so threads never share one)."""

    def __init__(self, backend: GenerationBackend):
        self.backend = backend
        self.calls = 0

    def generate(self, prompt_ids: list[list[int]], max_tokens: int) -> list[Generation]:
        self.calls += 1
        return self.backend.generate(prompt_ids, max_tokens)


def _group_seed(seed: int, ids: list[str]) -> int:
    return (seed * 1_000_003 + zlib.crc32("\n".join(ids).encode("utf-8"))) % (2**31)


class _GroupRunner:
    def __init__(self, backend, tokenizer, config: EvalConfig, agent_config: MemoryAgentConfig):
        self.backend = backend
        self.tokenizer = tokenizer
        self.config = config
        self.agent_config = agent_config
        self.template = agent_config.final_prompt if config.mode == "agent" else BASELINE_ANSWER_TEMPLATE
        self.prompter = (
            BaselinePrompter(tokenizer, config.baseline_window, agent_config.answer_tokens)
            if config.mode == "baseline"
            else None
        )

    def __call__(self, items: list[EvalItem]) -> list[dict]:
        if isinstance(self.backend, TransformersBackend):
            import torch

            torch.manual_seed(_group_seed(self.config.seed, [item.id for item in items]))
        start = time.perf_counter()
        metered = _MeteredBackend(self.backend)
        try:
            documents = [item.rows[item.row]["context"] for item in items]
            questions = [item.question for item in items]
            if self.config.mode == "agent":
                agent = MemoryAgent(metered, self.tokenizer, self.agent_config)
                outputs = [_agent_fields(t, self.config.memory_trace) for t in agent.run(questions, documents)]
            else:
                outputs = [_baseline_fields(a) for a in run_baseline(metered, self.prompter, questions, documents)]
        except BackendError as error:
            seconds = time.perf_counter() - start
            return [self._failed(item, error, seconds, metered.calls, len(items)) for item in items]
        seconds = time.perf_counter() - start
        records = []
        for item, fields in zip(items, outputs):
            kind = metric_kind(item.task) if self.config.metric == "auto" else self.config.metric
            prediction, metrics, score = score_answer(fields["raw_answer"], item.answers, kind, self.template)
            records.append(
                {
                    **self._head(item),
                    "status": OK,
                    "prediction": prediction,
                    "metric_kind": kind,
                    "metrics": metrics,
                    "score": score,
                    **fields,
                    "backend_calls": metered.calls,
                    "group_size": len(items),
                    "seconds": round(seconds / len(items), 6),
                    "latency_seconds": round(seconds, 6),
                }
            )
        return records

    def _head(self, item: EvalItem) -> dict:
        return {
            "id": item.id,
            "task": item.task,
            "length": item.length,
            "num_docs": item.num_docs,
            "target_tokens": item.target_tokens,
            "doc_tokens": item.doc_tokens,
            "question": item.question,
            "gold": item.answers,
            "mode": self.config.mode,
            **({"extra": item.extra} if item.extra else {}),
        }

    def _failed(self, item: EvalItem, error: Exception, seconds: float, calls: int, size: int) -> dict:
        return {
            **self._head(item),
            "status": FAILED,
            "error": f"{type(error).__name__}: {error}",
            "backend_calls": calls,
            "group_size": size,
            "seconds": round(seconds / size, 6),
            "latency_seconds": round(seconds, 6),
        }


def _agent_fields(trajectory, memory_trace: str) -> dict:
    memory_convs = [c for c in trajectory.conversations if c.kind == "memory"]
    final = trajectory.conversations[-1]
    memory_read = sum(len(c.prompt_ids) for c in memory_convs)
    memory_generated = sum(len(c.completion_ids) for c in memory_convs)
    memories = {"full": trajectory.memories, "last": trajectory.memories[-1:], "none": []}[memory_trace]
    return {
        "raw_answer": trajectory.answer,
        "doc_tokens": trajectory.document_tokens,
        "memories": memories,
        "num_chunks": trajectory.num_chunks,
        "requests": len(trajectory.conversations),
        "truncated_memories": sum(c.finish_reason == "length" for c in memory_convs),
        "answer_finish_reason": final.finish_reason,
        "tokens": {
            "read": trajectory.num_prompt_tokens,
            "generated": trajectory.num_completion_tokens,
            "memory_read": memory_read,
            "memory_generated": memory_generated,
            "final_read": len(final.prompt_ids),
            "final_generated": len(final.completion_ids),
        },
    }


def _baseline_fields(answer) -> dict:
    return {
        "raw_answer": answer.answer,
        "memories": [],
        "num_chunks": 0,
        "requests": 1,
        "doc_tokens": answer.doc_tokens,
        "kept_doc_tokens": answer.kept_doc_tokens,
        "tokens": {"read": answer.prompt_tokens, "generated": answer.completion_tokens},
    }


# ----------------------------------------------------------------------------------------------------------
# The evaluation


def _backend_info(backend) -> dict:
    info: dict[str, Any] = {"backend": type(backend).__name__}
    if isinstance(backend, OpenAIBackend):
        info.update(model=backend.model, **backend.sampling)
    elif isinstance(backend, TransformersBackend):
        info.update({k: v for k, v in backend.sampling.items() if k in ("do_sample", "temperature", "top_p")})
    return info


def _check_run_file(path: str, run: dict) -> None:
    """Refuse to mix results of different settings in one output directory."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            previous = json.load(handle)
        keys = ("mode", "agent", "baseline_window", "metric", "sampling")
        changed = [k for k in keys if previous.get(k) != run.get(k)]
        if changed:
            details = "; ".join(f"{k}: {previous.get(k)} -> {run.get(k)}" for k in changed)
            raise ValueError(
                f"{os.path.dirname(path)} holds results of other settings ({details}); use another output "
                "directory or delete it"
            )
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(run, handle, indent=2)


def _default_parallelism(backend, config: EvalConfig) -> tuple[int, int]:
    server = isinstance(backend, OpenAIBackend)
    batch_size = config.batch_size or (1 if server else 8)
    workers = config.workers or (backend.max_concurrency if server else 1)
    if workers > 1 and isinstance(backend, TransformersBackend):
        raise ValueError(
            "a local TransformersBackend runs one group at a time (workers=1); raise batch_size to batch samples"
        )
    return batch_size, workers


def evaluate(
    backend: GenerationBackend,
    tokenizer,
    data,
    output_dir: str,
    config: EvalConfig | None = None,
    agent_config: MemoryAgentConfig | None = None,
    **overrides,
) -> EvalResult:
    """Evaluate `backend` on `data` (see `load_eval_items`), writing results, summary, cost and plot to `output_dir`.

    Resumable: finished samples in `output_dir/results.jsonl` are skipped, failed ones retried. Fields of
    `EvalConfig` may be given as keywords (overriding `config`), e.g. `evaluate(..., mode="baseline")`.
    """
    config = replace(config, **overrides) if config else EvalConfig(**overrides)
    agent_config = agent_config or MemoryAgentConfig()
    items = load_eval_items(data, config.max_samples)
    os.makedirs(output_dir, exist_ok=True)
    run = {
        "name": config.name,
        "mode": config.mode,
        "agent": asdict(agent_config) if config.mode == "agent" else {"answer_tokens": agent_config.answer_tokens},
        "baseline_window": config.baseline_window if config.mode == "baseline" else None,
        "metric": config.metric,
        "sampling": _backend_info(backend),
    }
    _check_run_file(os.path.join(output_dir, RUN_FILE), run)
    store = ResultsStore(os.path.join(output_dir, RESULTS_FILE))
    pending = [item for item in items if item.id not in store.finished]
    batch_size, workers = _default_parallelism(backend, config)
    groups = [pending[i : i + batch_size] for i in range(0, len(pending), batch_size)]
    runner = _GroupRunner(backend, tokenizer, config, agent_config)
    new_ids = {item.id for item in pending}
    start = time.perf_counter()
    bar = tqdm(total=len(pending), desc=f"eval {config.name}", unit="sample", disable=not config.progress)
    if store.finished:
        bar.write(f"resuming: {len(items) - len(pending)} of {len(items)} samples already finished")

    def save(records: list[dict]) -> None:
        store.write(records)
        bar.update(len(records))
        bar.set_postfix(failed=sum(1 for i in new_ids if i in store.failed))

    try:
        if workers == 1:
            for group in groups:
                save(runner(group))
        else:
            _run_threaded(runner, groups, workers, save)
    finally:
        bar.close()
    wall = time.perf_counter() - start
    records = [store.finished.get(i.id) or store.failed.get(i.id) for i in items]
    records = [r for r in records if r is not None]
    summary = summarize(records, [i.expected() for i in items], name=config.name, mode=config.mode)
    chunk_tokens = agent_config.chunk_tokens if config.mode == "agent" else None
    cost = cost_report(records, wall, new_ids, chunk_tokens, config.mode)
    write_reports(output_dir, summary, cost, plot=config.plot)
    if config.progress:
        print(summary_markdown(summary))
        print(cost_text(cost))
    return EvalResult(summary=summary, cost=cost, records=records, output_dir=output_dir)


def _run_threaded(runner, groups: list, workers: int, save) -> None:
    """Run groups on `workers` threads, saving each group's records from this thread as soon as it ends."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memagent-eval")
    queue = iter(groups)
    running = {pool.submit(runner, group) for group in _take(queue, workers)}
    try:
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                save(future.result())
            running |= {pool.submit(runner, group) for group in _take(queue, len(done))}
    finally:
        # On an error or Ctrl-C nothing new starts; groups already running finish but are not saved.
        pool.shutdown(wait=False, cancel_futures=True)


def _take(iterator, count: int) -> list:
    return [group for _, group in zip(range(count), iterator)]


def write_reports(output_dir: str, summary: dict, cost: dict, plot: bool = True) -> None:
    """summary.json, summary.md, cost.json and (when matplotlib is installed) accuracy.png."""
    _write_json(os.path.join(output_dir, SUMMARY_JSON), summary)
    _write_text(os.path.join(output_dir, SUMMARY_MD), summary_markdown(summary))
    _write_json(os.path.join(output_dir, COST_FILE), cost)
    if plot:
        from .plots import MissingMatplotlib, plot_accuracy

        try:
            plot_accuracy([summary], os.path.join(output_dir, PLOT_FILE))
        except MissingMatplotlib as error:
            print(f"warning: no plot drawn: {error}")


def _write_json(path: str, data: dict) -> None:
    _write_text(path, json.dumps(data, indent=2) + "\n")


def _write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def evaluate_checkpoint(
    checkpoint: str,
    data,
    output_dir: str | None = None,
    agent_config: MemoryAgentConfig | None = None,
    temperature: float = 0.7,
    top_p: float = 0.95,
    device: str | None = None,
    **overrides,
) -> EvalResult:
    """Evaluate a saved model directory (e.g. a training checkpoint) with a local `TransformersBackend`.

    For training scripts: `evaluate_checkpoint("out/checkpoint-100", dataset).summary`. Sampling defaults to
    the paper's evaluation (T=0.7, top_p=0.95; temperature 0 is greedy). Without `output_dir` the files go to
    a temporary directory. Other keywords are `EvalConfig` fields.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype="auto", device_map=device).eval()
    backend = TransformersBackend(model, tokenizer, temperature=temperature, top_p=top_p, do_sample=temperature > 0)
    overrides.setdefault("name", os.path.basename(os.path.normpath(checkpoint)))
    output_dir = output_dir or tempfile.mkdtemp(prefix="memagent-eval-")
    return evaluate(backend, tokenizer, data, output_dir, EvalConfig(**overrides), agent_config)

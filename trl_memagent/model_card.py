"""Model cards for memory agents: what the checkpoint is, how it reads, how it was trained and how it scores.

TRL's generic card says nothing a memory agent needs (chunk and memory sizes, the prompt variant, how to run
it chunk by chunk). `build_model_card` renders one that does, with Hub metadata (`trl`/`memagent` tags,
base model, datasets, license), the evaluation table and plot when a run of the evaluation harness sits in
`<dir>/eval/` (the paper's numbers beside it), usage with `trl-memagent answer` and `vllm serve` +
`OpenAIBackend`, and the citations. `MemAgentModelCardMixin` makes a trainer write it at every checkpoint
and push; the inputs of a card are kept beside it (`memagent_card.json`) so it can be re-rendered after a
later evaluation: `python -m trl_memagent.model_card DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from importlib.metadata import version

from huggingface_hub import ModelCard, ModelCardData

EVAL_DIR = "eval"  # evaluation results of a checkpoint: `<dir>/eval/summary.json`, `<dir>/eval/accuracy.png`
CONTEXT_FILE = "memagent_card.json"
DEFAULT_LICENSE = "apache-2.0"  # Qwen2.5-7B/14B-Instruct's license; set model_card_license for other bases
TINY_BASE = "tiny"  # `model_name_or_path: tiny` builds the offline tiny model (trl_memagent.tiny)
PAPER_MODELS = ("RL-MemAgent-7B", "RL-MemAgent-14B")

MEMAGENT_CITATION = """\
@inproceedings{yu2026memagent,
    title     = {{MemAgent: Reshaping Long-Context LLM with Multi-Conv RL-based Memory Agent}},
    author    = {Yu, Hongli and Chen, Tinghong and Feng, Jiangtao and Chen, Jiangjie and Dai, Weinan and
                 Yu, Qiying and Zhang, Ya-Qin and Ma, Wei-Ying and Liu, Jingjing and Wang, Mingxuan and
                 Zhou, Hao},
    booktitle = {International Conference on Learning Representations (ICLR)},
    year      = 2026,
    eprint    = {arXiv:2507.02259},
}"""
TRL_CITATION = """\
@software{vonwerra2020trl,
    title   = {{TRL: Transformers Reinforcement Learning}},
    author  = {von Werra, Leandro and Belkada, Younes and Tunstall, Lewis and Beeching, Edward and Thrush, Tristan and
               Lambert, Nathan and Huang, Shengyi and Rasul, Kashif and Gallou{\\'e}dec, Quentin},
    license = {Apache-2.0},
    url     = {https://github.com/huggingface/trl},
    year    = {2020}
}"""

# Rendered by huggingface_hub (Jinja2); values passed in (citations included) are not re-interpreted.
TEMPLATE = """\
---
{{ card_data }}
---

# {{ model_name }}

A **memory agent** ([MemAgent](https://huggingface.co/papers/2507.02259)): it answers questions about documents of \
any length by reading them {{ memory.chunk_tokens }} tokens at a time and rewriting a text memory of at most \
{{ memory.memory_tokens }} tokens after each chunk, in a fresh conversation every time; the answer comes from the \
question and the final memory alone, so every call fits in a fixed window whatever the document's length.

{{ base_line }}
It was trained with {{ trainer_name }} (multi-conversation GRPO: `trl_memagent` on \
[TRL](https://github.com/huggingface/trl)'s `GRPOTrainer`){% if global_step %} for {{ global_step }} optimizer \
steps{% endif %}.
{% if adapter %}
{% if adapter.merged %}The LoRA adapter trained here (r={{ adapter.r }}, alpha={{ adapter.alpha }}) was merged into \
the base model: this repository holds full weights.{% else %}This repository holds a **LoRA adapter** \
(r={{ adapter.r }}, alpha={{ adapter.alpha }}, modules: {{ adapter.target_modules }}); `from_pretrained` loads the \
base model and applies it (needs `peft`).{% endif %}{% if adapter.quantization %} The base model was loaded in \
{{ adapter.quantization }} during training (QLoRA).{% endif %}
{% endif %}

## Memory settings

| setting | value |
|---|---|
| chunk tokens (document tokens read per memory update) | {{ memory.chunk_tokens }} |
| memory tokens (most new tokens of a memory update) | {{ memory.memory_tokens }} |
| answer tokens (most new tokens of the final answer) | {{ memory.answer_tokens }} |
| question max tokens | {{ memory.question_max_tokens }} |
| max chunks per training document | {{ memory.max_chunks if memory.max_chunks is not none else "all" }}\
{% if memory.max_chunks is not none %} ({{ memory.truncation }} truncation){% endif %} |
| final-answer prompt | `{{ memory.final_prompt }}` |

Use the same chunk, memory and answer sizes and the `{{ memory.final_prompt }}` prompt at inference: the memory \
was trained to fit them. The prompts are MemAgent's exact strings, assembled in token space.

## Training

- Base model: {{ base_text }}
- Training data: {{ dataset_text }}
- Reward functions: {{ reward_text }}
- Method: multi-conversation GRPO; the final answer's reward is broadcast to every memory-update conversation of \
its rollout, one token mean over all (group, conversation, token).

| hyperparameter | value |
|---|---|
{% for key, value in training.items() %}| {{ key }} | {{ value }} |
{% endfor %}

## Evaluation

{% if eval_rows %}{{ eval_intro }}

| task | length | doc tokens | n | failed | metric | accuracy (%) | paper RL-MemAgent-7B | paper RL-MemAgent-14B |
|---|---|---|---|---|---|---|---|---|
{% for row in eval_rows %}| {{ row.task }} | {{ row.length }} | {{ row.doc_tokens }} | {{ row.n }} | {{ row.failed }} \
| {{ row.metric }} | {{ row.accuracy }} | {{ row.paper_7b }} | {{ row.paper_14b }} |
{% endfor %}
Overall: {{ eval_overall }}
{% if eval_plot %}
![Accuracy against document length]({{ eval_plot }})
{% endif %}
{% else %}No evaluation results yet. Evaluate this checkpoint with `trl-memagent eval`, writing to \
`{{ eval_dir }}/` beside it, then run `python -m trl_memagent.model_card <this directory>` to add the table and \
the plot here.
{% endif %}
The paper's RULER-HQA results (arXiv:2507.02259 v2, sub_em %, 128 questions per length) for reference:

| model | {{ paper_lengths | join(" | ") }} |
|---|{% for _ in paper_lengths %}---|{% endfor %}
{% for name, values in paper_rows.items() %}| {{ name }} | {{ values | join(" | ") }} |
{% endfor %}

## How to use

With `trl_memagent` installed, answer a question about a document of any length (streamed from disk; \
`--show-memory` prints the memory after every chunk):

```bash
trl-memagent answer --model {{ repo }} --document book.txt --question "Who wrote the letter?" \\
    --chunk-tokens {{ memory.chunk_tokens }} --memory-tokens {{ memory.memory_tokens }} \
--answer-tokens {{ memory.answer_tokens }} --final-prompt {{ memory.final_prompt }} --show-memory
```

Served with vLLM, from Python:

```bash
{{ serve_command }}
```

```python
from transformers import AutoTokenizer
from trl_memagent import MemoryAgent, MemoryAgentConfig, OpenAIBackend

tokenizer = AutoTokenizer.from_pretrained("{{ repo }}")
backend = OpenAIBackend("http://127.0.0.1:8000/v1", "{{ served_name }}", tokenizer, temperature=0.7, top_p=0.95)
config = MemoryAgentConfig(chunk_tokens={{ memory.chunk_tokens }}, memory_tokens={{ memory.memory_tokens }}, \
answer_tokens={{ memory.answer_tokens }}, final_prompt="{{ memory.final_prompt }}")
(trajectory,) = MemoryAgent(backend, tokenizer, config).run(["Who wrote the letter?"], [open("book.txt").read()])
print(trajectory.memories[-1], trajectory.answer, sep="\\n")
```

The same agent runs a local model with `TransformersBackend(model, tokenizer)` in place of `OpenAIBackend`.

### Framework versions

{% for name, value in versions.items() %}- {{ name }}: {{ value }}
{% endfor %}
## Citations

MemAgent:

```bibtex
{{ memagent_citation }}
```

TRL:

```bibtex
{{ trl_citation }}
```
"""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_id(name: str | None) -> bool:
    """`owner/name` that is not a local path: the only kind of name Hub metadata may link to."""
    return bool(name) and bool(_HUB_ID.match(name)) and not os.path.exists(name)


@dataclass
class CardContext:
    """Everything a card says except the evaluation, which is read from the directory the card is written to."""

    model_name: str = field(metadata={"help": "Title of the card (the Hub repository's name)."})
    base_model: str | None = field(
        metadata={"help": "Hub id or local path of the base model; 'tiny' for the offline one."}
    )
    memory: dict = field(metadata={"help": "MemoryAgentConfig fields the model was trained with."})
    training: dict = field(default_factory=dict, metadata={"help": "Hyperparameters shown in the training table."})
    hub_model_id: str | None = field(default=None, metadata={"help": "Hub repository the card is pushed to."})
    dataset: str | None = field(default=None, metadata={"help": "Training data: a Hub dataset id or a local path."})
    dataset_description: str | None = field(
        default=None, metadata={"help": "How the training data was made, when it is not a Hub dataset."}
    )
    reward_funcs: list[str] = field(default_factory=list, metadata={"help": "Reward function names."})
    adapter: dict | None = field(
        default=None, metadata={"help": "LoRA: r, alpha, target_modules, merged, quantization; None: full weights."}
    )
    global_step: int | None = field(default=None, metadata={"help": "Optimizer steps taken."})
    license: str = field(default=DEFAULT_LICENSE, metadata={"help": "License identifier of the weights."})
    tags: list[str] = field(default_factory=list, metadata={"help": "Extra Hub tags."})
    trainer_name: str = field(default="MultiConv GRPO", metadata={"help": "Name of the training method."})


def card_metadata(context: CardContext) -> ModelCardData:
    """Hub metadata: tags (trl, memagent, ...), base_model and datasets when they are Hub ids, license."""
    tags = ["trl", "memagent", "grpo", "long-context", "memory-agent"]
    if context.adapter and not context.adapter.get("merged"):
        tags.append("lora")
    tags += [t for t in context.tags if t not in tags]
    return ModelCardData(
        base_model=context.base_model if is_hub_id(context.base_model) else None,
        datasets=[context.dataset] if is_hub_id(context.dataset) else None,
        library_name="peft" if context.adapter and not context.adapter.get("merged") else "transformers",
        license=context.license,
        model_name=context.model_name,
        pipeline_tag="text-generation",
        tags=tags,
    )


def load_eval_results(directory: str) -> tuple[dict | None, dict | None, str | None]:
    """(summary, run info, plot path relative to `directory`) of `<directory>/eval/`, or Nones when absent."""
    eval_dir = os.path.join(directory, EVAL_DIR)
    summary_path = os.path.join(eval_dir, "summary.json")
    if not os.path.isfile(summary_path):
        return None, None, None
    with open(summary_path, encoding="utf-8") as handle:
        summary = json.load(handle)
    run = None
    if os.path.isfile(os.path.join(eval_dir, "run.json")):
        with open(os.path.join(eval_dir, "run.json"), encoding="utf-8") as handle:
            run = json.load(handle)
    plot = f"{EVAL_DIR}/accuracy.png" if os.path.isfile(os.path.join(eval_dir, "accuracy.png")) else None
    return summary, run, plot


def _paper_table() -> tuple[list[str], list[int], dict[str, list]]:
    from .evaluation.plots import load_paper_results

    table = load_paper_results()["ruler_hqa"]
    return table["lengths"], table["num_docs"], {m: table["v2"][m] for m in PAPER_MODELS}


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def eval_rows(summary: dict) -> list[dict]:
    """One row per (task, length) group of an evaluation summary, with the paper's number where one exists.

    The paper reports per-length numbers for RULER-HQA only; a `ruler_hqa` row with the same number of
    documents as one of the paper's lengths gets the RL-MemAgent-7B/14B values (v2) beside it.
    """
    _, paper_docs, paper = _paper_table()
    rows = []
    for group in summary["groups"]:
        paper_7b = paper_14b = None
        if group["task"] == "ruler_hqa" and group.get("num_docs") in paper_docs:
            index = paper_docs.index(group["num_docs"])
            paper_7b, paper_14b = paper["RL-MemAgent-7B"][index], paper["RL-MemAgent-14B"][index]
        rows.append(
            {
                "task": group["task"],
                "length": group["length"],
                "doc_tokens": _cell(group.get("doc_tokens")),
                "n": group["n"],
                "failed": group["failed"],
                "metric": group["metric"],
                "accuracy": _cell(group["accuracy"]),
                "paper_7b": _cell(paper_7b),
                "paper_14b": _cell(paper_14b),
            }
        )
    return rows


def _eval_intro(summary: dict, run: dict | None) -> str:
    text = f"Evaluation of this checkpoint with the trl_memagent harness (run `{summary.get('name') or 'model'}`"
    if run:
        sampling = run.get("sampling") or {}
        settings = ", ".join(
            f"{k}={v}" for k, v in sampling.items() if k in ("temperature", "top_p") and v is not None
        )
        agent = run.get("agent") or {}
        sizes = ", ".join(f"{k}={agent[k]}" for k in ("chunk_tokens", "memory_tokens", "answer_tokens") if k in agent)
        text += "; " + "; ".join(part for part in (settings, sizes) if part)
    return (
        text + "). Accuracy is the percentage of finished samples: sub_em for QA tasks, RULER's string match "
        "(all references found) for synthetic RULER tasks; failed samples are counted apart, never scored."
    )


def _describe_base(base_model: str | None) -> tuple[str, str]:
    """(sentence for the card's introduction, text for the training list)."""
    if base_model == TINY_BASE:
        text = "a randomly initialised tiny Qwen2 and a tokenizer trained on the spot (`trl_memagent.tiny`)"
        return f"The base model is {text}: this checkpoint exercises the pipeline, it is not a useful reader.", text
    if is_hub_id(base_model):
        link = f"[{base_model}](https://huggingface.co/{base_model})"
        return f"It is a fine-tuned version of {link}.", link
    text = f"local model `{base_model}`" if base_model else "unknown"
    return f"The base model is a {text}.", text


def max_model_len(memory: dict) -> int:
    """The longest call of the agent (prompt + new tokens) plus room for the chat template, rounded up to 1K."""
    question, memory_tokens = memory["question_max_tokens"], memory["memory_tokens"]
    update = question + memory["chunk_tokens"] + 2 * memory_tokens  # reads a memory, writes the next one
    final = question + memory_tokens + memory["answer_tokens"]
    return -(-(max(update, final) + 512) // 1024) * 1024


def _versions() -> dict[str, str]:
    names = {"trl_memagent": "trl_memagent", "TRL": "trl", "Transformers": "transformers", "PyTorch": "torch"}
    names.update({"Datasets": "datasets", "Tokenizers": "tokenizers", "PEFT": "peft"})
    return {label: version(package) for label, package in names.items()}


def build_model_card(
    context: CardContext, summary: dict | None = None, run: dict | None = None, plot: str | None = None
) -> ModelCard:
    """The card of a memory agent; `summary`/`run`/`plot` come from `load_eval_results` (None: no evaluation yet)."""
    base_line, base_text = _describe_base(context.base_model)
    if is_hub_id(context.dataset):
        dataset_text = f"[{context.dataset}](https://huggingface.co/datasets/{context.dataset})"
    else:
        dataset_text = f"`{context.dataset}`" if context.dataset else ""
    if context.dataset_description:
        dataset_text = (
            f"{dataset_text} ({context.dataset_description})" if dataset_text else context.dataset_description
        )
    dataset_text = dataset_text or "not recorded"
    lengths, _, paper = _paper_table()
    memory = context.memory
    repo = context.hub_model_id or f"./{context.model_name}"
    serve_command, served_name = f"vllm serve {repo} --max-model-len {max_model_len(memory)}", repo
    if context.adapter and not context.adapter.get("merged"):  # vLLM serves an adapter on top of its base model
        served_name = "memagent"
        serve_command = (
            f"vllm serve {context.base_model} --max-model-len {max_model_len(memory)} --enable-lora "
            f"--max-lora-rank {context.adapter['r']} --lora-modules {served_name}={repo}"
        )
    overall = None
    if summary is not None:
        totals = summary["overall"]
        overall = (
            f"accuracy {_cell(totals['accuracy'])}% over {totals['n']} finished samples; "
            f"{totals['failed']} failed, {totals['pending']} pending."
        )
    return ModelCard.from_template(
        card_metadata(context),
        template_str=TEMPLATE,
        model_name=context.model_name,
        base_line=base_line,
        base_text=base_text,
        trainer_name=context.trainer_name,
        global_step=context.global_step,
        adapter=context.adapter,
        memory=memory,
        training=context.training,
        dataset_text=dataset_text,
        reward_text=", ".join(f"`{name}`" for name in context.reward_funcs) or "not recorded",
        eval_rows=eval_rows(summary) if summary is not None else None,
        eval_intro=_eval_intro(summary, run) if summary is not None else None,
        eval_overall=overall,
        eval_plot=plot,
        eval_dir=EVAL_DIR,
        paper_lengths=lengths,
        paper_rows={name: [_cell(v) for v in values] for name, values in paper.items()},
        repo=repo,
        serve_command=serve_command,
        served_name=served_name,
        versions=_versions(),
        memagent_citation=MEMAGENT_CITATION,
        trl_citation=TRL_CITATION,
    )


def write_model_card(directory: str, context: CardContext) -> ModelCard:
    """Write `README.md` (with `<directory>/eval/` results when present) and the card's inputs beside it."""
    os.makedirs(directory, exist_ok=True)
    card = build_model_card(context, *load_eval_results(directory))
    card.save(os.path.join(directory, "README.md"))
    with open(os.path.join(directory, CONTEXT_FILE), "w", encoding="utf-8") as handle:
        json.dump(asdict(context), handle, indent=2)
    return card


def refresh_model_card(directory: str) -> ModelCard:
    """Re-render a directory's card from its saved inputs, e.g. after `trl-memagent eval --output-dir DIR/eval`."""
    path = os.path.join(directory, CONTEXT_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path!r} not found: the directory has no card written by trl_memagent")
    with open(path, encoding="utf-8") as handle:
        return write_model_card(directory, CardContext(**json.load(handle)))


# ----------------------------------------------------------------------------------------------------------
# From a trainer


def lora_summary(model) -> dict | None:
    """r, alpha and target modules of a PEFT model's adapter, and its base's quantization; None without PEFT."""
    from accelerate.utils import is_peft_model

    if not is_peft_model(model):
        return None
    config = model.peft_config[model.active_adapter]
    modules = config.target_modules  # a string ("all-linear") or the set of module names it resolved to
    quantization = getattr(model.get_base_model().config, "quantization_config", None)
    if quantization is not None:
        quantization = quantization if isinstance(quantization, dict) else quantization.to_dict()
        quantization = (
            "4-bit" if quantization.get("load_in_4bit") else "8-bit" if quantization.get("load_in_8bit") else None
        )
    return {
        "r": config.r,
        "alpha": config.lora_alpha,
        "target_modules": modules
        if isinstance(modules, str)
        else ", ".join(sorted({m.split(".")[-1] for m in modules})),
        "merged": False,
        "quantization": quantization,
    }


def training_summary(args, world_size: int) -> dict:
    """The hyperparameters a reader needs to reproduce or judge a run (the paper's names in brackets)."""
    schedule = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    summary = {
        "group size (num_generations)": args.num_generations,
        "learning rate": args.learning_rate,
        "schedule / warm-up": f"{schedule} / {args.warmup_steps}",
        "KL coefficient (beta)": args.beta,
        "clip (epsilon low / high), dual-clip (delta)": f"{args.epsilon} / {args.epsilon_high or args.epsilon} / "
        f"{args.delta}",
        "loss / advantage scaling": f"{args.loss_type} / {args.scale_rewards}",
        "conversation weighting": args.conversation_weighting,
        "rollouts per generation batch (questions x group)": args.generation_batch_size,
        "optimizer steps per generation batch": args.steps_per_generation // args.gradient_accumulation_steps,
        "processes": world_size,
        "rollout temperature / top_p": f"{args.temperature} / {args.top_p}",
        "generation": f"vLLM ({args.vllm_mode})" if args.use_vllm else "transformers generate",
        "training length": f"{args.max_steps} steps" if args.max_steps > 0 else f"{args.num_train_epochs} epochs",
        "seed": args.seed,
    }
    return summary


def card_context_from_trainer(
    trainer, model_name: str | None = None, dataset_name: str | None = None, tags=None
) -> CardContext:
    """A card's inputs from a `MultiConvGRPOTrainer` (settings from its args, LoRA from its model)."""
    from trl.trainer.utils import get_config_model_id

    args = trainer.args
    if model_name is None:
        model_name = (
            args.hub_model_id.split("/")[-1]
            if args.hub_model_id
            else os.path.basename(os.path.normpath(args.output_dir))
        )
    model = trainer.accelerator.unwrap_model(trainer.model)
    adapter = getattr(trainer, "model_card_adapter", None) or lora_summary(model)
    memory = asdict(args.memory_agent_config())
    return CardContext(
        model_name=model_name,
        base_model=getattr(trainer, "model_card_base_model", None) or get_config_model_id(model.config) or None,
        memory=memory,
        training=training_summary(args, trainer.accelerator.num_processes),
        hub_model_id=args.hub_model_id,
        dataset=dataset_name or getattr(trainer, "model_card_dataset", None),
        dataset_description=getattr(trainer, "model_card_dataset_description", None),
        reward_funcs=list(trainer.reward_func_names),
        adapter=adapter,
        global_step=trainer.state.global_step,
        license=getattr(trainer, "model_card_license", None) or DEFAULT_LICENSE,
        tags=[tags] if isinstance(tags, str) else list(tags or []),
        trainer_name=getattr(trainer, "_name", "MultiConv GRPO"),
    )


class MemAgentModelCardMixin:
    """Trainer mixin: memory-agent cards instead of TRL's generic one, in `output_dir` and in every checkpoint.

    Put it before `GRPOTrainer` in the bases. `create_model_card` runs at each checkpoint save and in
    `push_to_hub` (transformers/TRL call it), so every push carries the card. Optional instance attributes
    refine it: `model_card_dataset`, `model_card_dataset_description`, `model_card_license`,
    `model_card_base_model` (the name as the user gave it) and `model_card_adapter` (set after merging LoRA).
    """

    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        if not self.is_world_process_zero():
            return
        context = card_context_from_trainer(self, model_name, dataset_name, tags)
        context.license = kwargs.get("license") or context.license  # transformers' create_model_card keyword
        write_model_card(self.args.output_dir, context)

    def _save_checkpoint(self, model, trial):
        if self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            checkpoint = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            write_model_card(
                os.path.join(self._get_output_dir(trial=trial), checkpoint), card_context_from_trainer(self)
            )
        super()._save_checkpoint(model, trial)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trl_memagent.model_card",
        description="Re-render the model card of a checkpoint directory written by trl_memagent (e.g. after an "
        "evaluation written to DIR/eval with `trl-memagent eval`).",
    )
    parser.add_argument("directory", help="Checkpoint directory holding memagent_card.json.")
    args = parser.parse_args(argv)
    refresh_model_card(args.directory)
    print(os.path.join(args.directory, "README.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

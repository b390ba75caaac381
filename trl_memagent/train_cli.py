"""`trl-memagent train`: train a memory agent with `MultiConvGRPOTrainer` from a TRL-style YAML recipe.

    trl-memagent train --config recipes/tiny-cpu.yaml [--any_field value ...]
    accelerate launch --config_file recipes/accelerate/zero3-multinode.yaml -m trl_memagent.train_cli \\
        --config recipes/memagent-qwen2.5-7b-instruct.yaml

TRL's `TrlParser` fills three dataclasses: `MemAgentScriptArguments` (data, reward functions, final
evaluation, publishing), `MultiConvGRPOConfig` (the trainer) and TRL's `ModelConfig` (model, LoRA,
quantization). The recipe's keys become defaults and command-line flags override them. Before TRL parses
anything, every key and value of the recipe and of the command line is checked against those dataclasses, so
a mistyped key or a wrong type fails at once with a message naming the key, the file and the expected type
(argparse alone would take a prefix for a key and pass a recipe's value through unchecked).

After training the model is saved with its model card; optionally evaluated with the evaluation harness
(the card then carries the table and the plot), and pushed with transformers' `push_to_hub` flow: a LoRA
run pushes its adapter, or with `push_merged` the adapter merged into the base model.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import importlib
import os
import shutil
import sys
import types
import typing
from dataclasses import dataclass, field
from enum import Enum

from trl import ModelConfig, ScriptArguments, TrlParser

from .config import MultiConvGRPOConfig
from .model_card import EVAL_DIR, TINY_BASE, card_context_from_trainer, lora_summary, write_model_card

USAGE = "trl-memagent train --config RECIPE.yaml [--field value ...]"
SYNTHETIC = "synthetic"
TINY_DIR = "_tiny-base"  # under output_dir; names starting with "_" are never pushed to the Hub
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
_BOOL_STRINGS = {"true", "false", "yes", "no", "1", "0", "t", "f", "y", "n"}


class RecipeError(ValueError):
    """A recipe or a command line names an unknown field or gives a value of the wrong type."""


@dataclass
class MemAgentScriptArguments(ScriptArguments):
    """What to train on, how to score it, what to do after training. TRL's dataset fields are inherited."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "'synthetic' (built-in RULER tasks generated offline with the model's tokenizer), a local "
            ".parquet/.jsonl/.json file, a local directory or a Hub dataset, in the custom format (prompt, context, "
            "answers)."
        },
    )
    eval_dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Data evaluated during training when eval_strategy is not 'no' (default: dataset_name's "
            "dataset_test_split)."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on the first N samples only (None: all)."}
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["memagent_reward"],
        metadata={
            "help": "Reward functions: names from trl_memagent.rewards (memagent_reward, the paper's; "
            "memagent_multi_value_reward) or dotted import paths (my_module.my_reward)."
        },
    )
    synthetic_tasks: list[str] = field(
        default_factory=lambda: ["niah_single_1", "niah_single_2", "niah_multikey_1", "vt"],
        metadata={"help": "dataset_name 'synthetic': RULER tasks (trl_memagent.data.RULER_TASKS, offline ones)."},
    )
    synthetic_lengths: list[int] = field(
        default_factory=lambda: [1024, 2048], metadata={"help": "dataset_name 'synthetic': document lengths, tokens."}
    )
    synthetic_samples: int = field(
        default=8, metadata={"help": "dataset_name 'synthetic': samples per task and length."}
    )
    synthetic_seed: int = field(default=0, metadata={"help": "dataset_name 'synthetic': seed of the generator."})
    final_eval: bool = field(
        default=False,
        metadata={
            "help": "After training, evaluate the saved checkpoint with the evaluation harness (local transformers "
            "model on the main process) into OUTPUT_DIR/eval; the model card then shows the table and the plot."
        },
    )
    final_eval_data: list[str] | None = field(
        default=None,
        metadata={"help": "Files to evaluate on (custom format); default: synthetic RULER tasks (final_eval_*)."},
    )
    final_eval_tasks: list[str] = field(
        default_factory=lambda: ["niah_single_1", "niah_multikey_1"],
        metadata={"help": "Synthetic final evaluation: RULER tasks."},
    )
    final_eval_lengths: list[int] = field(
        default_factory=lambda: [2048, 8192], metadata={"help": "Synthetic final evaluation: document lengths."}
    )
    final_eval_samples: int = field(
        default=4, metadata={"help": "Synthetic final evaluation: samples per task and length (the paper: 128)."}
    )
    final_eval_temperature: float = field(
        default=0.7, metadata={"help": "Final evaluation sampling temperature (the paper: 0.7; 0 is greedy)."}
    )
    final_eval_top_p: float = field(default=0.95, metadata={"help": "Final evaluation top-p (the paper: 0.95)."})
    push_merged: bool = field(
        default=False,
        metadata={
            "help": "LoRA only: merge the adapter into the base model after training (merge_and_unload) and save "
            "and push the full weights instead of the adapter. Needs hub_strategy 'end' when pushing."
        },
    )
    model_card_license: str = field(
        default="apache-2.0", metadata={"help": "License of the trained weights in the card (the base model's)."}
    )
    torch_num_threads: int | None = field(
        default=None,
        metadata={
            "help": "CPU threads of torch (torch.set_num_threads). Tiny models run fastest on 1: on a busy 2-core "
            "machine, 2 threads made the tiny model's generation about 100x slower. None: torch's default."
        },
    )

    def __post_init__(self):
        # A recipe may give a single value for a list field; TRL passes such values through as they are.
        for name in ("reward_funcs", "synthetic_tasks", "synthetic_lengths", "final_eval_tasks", "final_eval_lengths"):
            value = getattr(self, name)
            if not isinstance(value, list):
                setattr(self, name, [value])
        if isinstance(self.final_eval_data, str):
            self.final_eval_data = [self.final_eval_data]
        if not self.reward_funcs:
            raise ValueError("reward_funcs must name at least one reward function")


DATACLASSES = (MemAgentScriptArguments, MultiConvGRPOConfig, ModelConfig)


# ----------------------------------------------------------------------------------------------------------
# Parsing and checking


def _type_name(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_type_name(a) for a in args))
    if tp is type(None):
        return "null"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple, collections.abc.Sequence):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def _matches(value, tp) -> bool:
    """Whether a recipe or command-line value fits a field's annotation (strings are read as argparse would)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is typing.Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if tp is type(None):
        return value is None
    if origin is typing.Literal:
        return value in args
    if origin in (list, tuple, collections.abc.Sequence):
        item = args[0] if args else typing.Any
        if isinstance(value, list):
            return all(_matches(v, item) for v in value)
        return _matches(value, item)  # a single value for a list field, as TRL accepts it
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if tp is bool:
        return isinstance(value, bool) or (isinstance(value, str) and value.lower() in _BOOL_STRINGS)
    if tp in (int, float):
        if isinstance(value, bool):
            return False
        if isinstance(value, str):
            try:
                tp(value)
            except ValueError:
                return False
            return True
        return isinstance(value, int) or (tp is float and isinstance(value, float))
    if tp is str:
        return isinstance(value, str)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return isinstance(value, tp) or value in {member.value for member in tp}
    return True  # other classes (e.g. accelerate's ParallelismConfig): their own constructor checks them


def _fields() -> dict[str, tuple[type, dataclasses.Field]]:
    """Every field name of the three dataclasses -> (annotation, field)."""
    found = {}
    for cls in DATACLASSES:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.init:
                found[f.name] = (hints[f.name], f)
    return found


def _unknown(key: str, known, where: str) -> RecipeError:
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return RecipeError(f"{where}: unknown key {key!r}.{hint} (trl-memagent train --help lists every field)")


def check_value(key: str, value, where: str, fields=None) -> None:
    """Raise `RecipeError` naming `where` and `key` when `value` does not fit the field (type or choices)."""
    fields = fields or _fields()
    tp, f = fields[key]
    if not _matches(value, tp):
        raise RecipeError(f"{where}: {key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
    choices = f.metadata.get("choices")
    values = value if isinstance(value, list) else [value]
    if choices and any(v not in choices and v is not None for v in values):
        raise RecipeError(f"{where}: {key}: {value!r} is not one of {list(choices)}")


def check_recipe(recipe: dict, where: str) -> None:
    """Every key of a recipe must be a field (or `env`) and every value must fit that field's type."""
    if not isinstance(recipe, dict):
        raise RecipeError(f"{where}: a recipe must be a YAML mapping of field: value, got {type(recipe).__name__}")
    fields = _fields()
    for key, value in recipe.items():
        if key == "env":
            if not isinstance(value, dict):
                raise RecipeError(f"{where}: env: expected a mapping of environment variables, got {value!r}")
            continue
        if key not in fields:
            raise _unknown(key, fields, where)
        check_value(key, value, where, fields)


def check_command_line(argv: list[str], parser: TrlParser) -> None:
    """Unknown flags (no prefix matching) and values that do not fit their field fail with the flag's name."""
    fields = _fields()
    options = parser._option_string_actions
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if not token.startswith("--") or token in ("--help", "-h"):
            continue
        flag, _, inline = token.partition("=")
        if flag == "--config":
            index += 0 if inline else 1
            continue
        if flag not in options:
            raise _unknown(flag[2:], [o[2:] for o in options if o.startswith("--")], "command line")
        values = [inline] if inline else []
        while not inline and index < len(argv) and not argv[index].startswith("--"):
            values.append(argv[index])
            index += 1
        name = options[flag].dest
        if name not in fields or flag.startswith("--no_"):
            continue
        tp = fields[name][0]
        is_list = typing.get_origin(tp) is list or any(typing.get_origin(a) is list for a in typing.get_args(tp))
        if not values:
            if not _matches(True, tp):
                raise RecipeError(f"command line: {flag} needs a value ({_type_name(tp)})")
            continue
        if len(values) > 1 and not is_list:
            raise RecipeError(f"command line: {flag} takes one value ({_type_name(tp)}), got {values}")
        check_value(name, values if is_list else values[0], "command line", fields)


def make_parser() -> TrlParser:
    return TrlParser(DATACLASSES, prog="trl-memagent train", usage=USAGE, allow_abbrev=False)


def parse_args(argv: list[str]) -> tuple[MemAgentScriptArguments, MultiConvGRPOConfig, ModelConfig]:
    """Recipe + command line -> the three configs; `RecipeError` on an unknown key or a value of the wrong type."""
    import yaml

    parser = make_parser()
    if "--config" in argv:
        position = argv.index("--config")
        if position + 1 >= len(argv):
            raise RecipeError("command line: --config needs the path of a YAML recipe")
        path = argv[position + 1]
        if not os.path.isfile(path):
            raise RecipeError(f"--config {path!r}: no such file")
        with open(path, encoding="utf-8") as handle:
            check_recipe(yaml.safe_load(handle), path)
    check_command_line(argv, parser)
    script_args, training_args, model_args = parser.parse_args_and_config(argv)
    if model_args.model_name_or_path is None:
        raise RecipeError("model_name_or_path is required (a Hub id, a local directory, or 'tiny')")
    if script_args.dataset_name is None:
        raise RecipeError("dataset_name is required ('synthetic', a data file, or a Hub dataset)")
    if script_args.push_merged and not model_args.use_peft:
        raise RecipeError("push_merged merges a LoRA adapter: set use_peft: true, or drop push_merged")
    if script_args.push_merged and training_args.push_to_hub and training_args.hub_strategy != "end":
        raise RecipeError(
            "push_merged pushes the merged model once, at the end: set hub_strategy: end (checkpoint pushes would "
            "put adapter files into the same repository)"
        )
    return script_args, training_args, model_args


# ----------------------------------------------------------------------------------------------------------
# Building blocks


def load_reward_funcs(names: list[str]) -> list:
    """Reward callables from names in `trl_memagent.rewards` or dotted import paths (the working directory first)."""
    from . import rewards

    funcs = []
    for name in names:
        if "." not in name:
            if not callable(getattr(rewards, name, None)):
                raise ValueError(f"reward function {name!r} is not in trl_memagent.rewards; give a dotted import path")
            funcs.append(getattr(rewards, name))
            continue
        module_name, _, attribute = name.rpartition(".")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            func = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"reward function {name!r} cannot be imported: {error}") from error
        if not callable(func):
            raise ValueError(f"reward function {name!r} is not callable")
        funcs.append(func)
    return funcs


def resolve_model(model_args: ModelConfig, training_args: MultiConvGRPOConfig) -> str:
    """The model path to load; 'tiny' builds the offline tiny model under OUTPUT_DIR/_tiny-base first."""
    if model_args.model_name_or_path != TINY_BASE:
        return model_args.model_name_or_path
    from accelerate import PartialState

    from .tiny import save_tiny_model

    path = os.path.abspath(os.path.join(training_args.output_dir, TINY_DIR))  # adapters record this path
    with PartialState().main_process_first():
        if not os.path.isfile(os.path.join(path, "config.json")):
            save_tiny_model(path)
    return path


def synthetic_dataset(tokenizer, tasks: list[str], lengths: list[int], samples: int, seed: int):
    """RULER tasks generated offline (trl_memagent.data), fitted to `lengths` tokens of `tokenizer`."""
    from .data import build_ruler_dataset

    return build_ruler_dataset(tokenizer, tasks=tasks, target_tokens=lengths, num_samples=samples, seed=seed)


def load_training_data(script_args: MemAgentScriptArguments, training_args: MultiConvGRPOConfig, tokenizer):
    """(train dataset, eval dataset or None, description of the training data for the card)."""
    from accelerate import PartialState

    from .data import load_memagent_dataset

    def load(name: str, split: str):
        if name == SYNTHETIC:
            seed = script_args.synthetic_seed + (0 if split == script_args.dataset_train_split else 1)
            return synthetic_dataset(
                tokenizer,
                script_args.synthetic_tasks,
                script_args.synthetic_lengths,
                script_args.synthetic_samples,
                seed,
            )
        return load_memagent_dataset(name, split=split, name=script_args.dataset_config)

    with PartialState().main_process_first():  # the main process fills the datasets cache first
        train = load(script_args.dataset_name, script_args.dataset_train_split)
        evaluation = None
        if training_args.eval_strategy != "no":
            evaluation = load(
                script_args.eval_dataset_name or script_args.dataset_name, script_args.dataset_test_split
            )
    if script_args.max_train_samples is not None:
        train = train.select(range(min(script_args.max_train_samples, len(train))))
    if script_args.dataset_name == SYNTHETIC:
        description = (
            f"{len(train)} synthetic RULER samples generated offline (tasks {', '.join(script_args.synthetic_tasks)}; "
            f"lengths {', '.join(map(str, script_args.synthetic_lengths))} tokens; seed {script_args.synthetic_seed})"
        )
    else:
        description = f"{len(train)} samples, split {script_args.dataset_train_split!r}"
    return train, evaluation, description


def build_trainer(script_args: MemAgentScriptArguments, training_args: MultiConvGRPOConfig, model_args: ModelConfig):
    """A `MultiConvGRPOTrainer` for the three configs, with the model card's inputs attached."""
    from transformers import AutoTokenizer
    from trl import get_peft_config, get_quantization_config

    from .trainer import MultiConvGRPOTrainer

    model_path = resolve_model(model_args, training_args)
    model_init_kwargs = {
        "revision": model_args.model_revision,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    model_init_kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = model_init_kwargs
    tokenizer = AutoTokenizer.from_pretrained(
        model_path, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
    )
    train, evaluation, description = load_training_data(script_args, training_args, tokenizer)
    trainer = MultiConvGRPOTrainer(
        model_path,
        reward_funcs=load_reward_funcs(script_args.reward_funcs),
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=tokenizer,
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )
    trainer.model_card_base_model = model_args.model_name_or_path
    trainer.model_card_dataset = script_args.dataset_name if script_args.dataset_name != SYNTHETIC else None
    trainer.model_card_dataset_description = description
    trainer.model_card_license = script_args.model_card_license
    return trainer


def merge_adapter_dir(directory: str, dtype: str | None = None):
    """Replace the LoRA adapter saved in `directory` by the base model with the adapter merged in; returns it.

    The base is reloaded in `dtype` ("auto": its own) with `AutoPeftModelForCausalLM` rather than merged in
    place, so a QLoRA adapter merges into full-precision weights, not into 4-bit ones.
    """
    from peft import AutoPeftModelForCausalLM

    merged = AutoPeftModelForCausalLM.from_pretrained(directory, dtype=dtype or "auto").merge_and_unload()
    for name in ADAPTER_FILES:
        if os.path.isfile(os.path.join(directory, name)):
            os.remove(os.path.join(directory, name))
    merged.save_pretrained(directory)
    return merged


def merge_lora(trainer, output_dir: str, dtype: str | None) -> None:
    """After training: merged weights in `output_dir` and in the trainer (main process), so `push_to_hub` pushes them.

    Sharded runs (FSDP, ZeRO-3) cannot swap the model this way: they push the adapter, merged afterwards.
    """
    zero3 = trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3
    if trainer.is_fsdp_enabled or zero3:
        raise ValueError(
            "push_merged needs unsharded training (DDP or one GPU); with FSDP or ZeRO-3 push the adapter, then merge "
            "it with trl_memagent.train_cli.merge_adapter_dir"
        )
    trainer.model_card_adapter = {**lora_summary(trainer.accelerator.unwrap_model(trainer.model)), "merged": True}
    if trainer.accelerator.is_main_process:
        trainer.model = merge_adapter_dir(output_dir, dtype)


def final_evaluation(trainer, script_args: MemAgentScriptArguments, model_name: str) -> None:
    """Evaluate the saved model into OUTPUT_DIR/eval with the harness (main process), where the card finds it."""
    from .evaluation import evaluate_checkpoint

    args = trainer.args
    if trainer.accelerator.is_main_process:
        eval_dir = os.path.join(args.output_dir, EVAL_DIR)
        shutil.rmtree(eval_dir, ignore_errors=True)  # results of an earlier model must not be resumed
        data = script_args.final_eval_data or synthetic_dataset(
            trainer.processing_class,
            script_args.final_eval_tasks,
            script_args.final_eval_lengths,
            script_args.final_eval_samples,
            seed=script_args.synthetic_seed + 2,  # neither the training nor the in-training eval samples
        )
        evaluate_checkpoint(
            args.output_dir,
            data,
            output_dir=eval_dir,
            agent_config=args.memory_agent_config(),
            temperature=script_args.final_eval_temperature,
            top_p=script_args.final_eval_top_p,
            device=str(trainer.accelerator.device),
            name=model_name,
            seed=args.seed,
        )
    trainer.accelerator.wait_for_everyone()


def run(script_args: MemAgentScriptArguments, training_args: MultiConvGRPOConfig, model_args: ModelConfig):
    """Train, save with the card, optionally merge, evaluate and push; returns the trainer."""
    if script_args.torch_num_threads is not None:
        import torch

        torch.set_num_threads(script_args.torch_num_threads)
    trainer = build_trainer(script_args, training_args, model_args)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    output_dir = training_args.output_dir
    trainer.save_model(output_dir)
    if script_args.push_merged:
        trainer.accelerator.wait_for_everyone()
        merge_lora(trainer, output_dir, model_args.dtype)
    model_name = (
        training_args.hub_model_id.split("/")[-1]
        if training_args.hub_model_id
        else os.path.basename(os.path.normpath(output_dir))
    )
    if script_args.final_eval:
        final_evaluation(trainer, script_args, model_name)
    if trainer.accelerator.is_main_process:
        write_model_card(output_dir, card_context_from_trainer(trainer, model_name))
        trainer.accelerator.print(f"Model and card saved to {output_dir}")
    if training_args.push_to_hub:
        # transformers' flow: save, create_model_card (the memory-agent card), upload OUTPUT_DIR
        trainer.push_to_hub(dataset_name=trainer.model_card_dataset)
        trainer.accelerator.print(f"Pushed to https://huggingface.co/{trainer.hub_model_id}")
    trainer.accelerator.end_training()
    return trainer


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        script_args, training_args, model_args = parse_args(argv)
    except ValueError as error:  # RecipeError, or a config's own check (e.g. MultiConvGRPOConfig.__post_init__)
        print(f"trl-memagent train: error: {error}", file=sys.stderr)
        return 2
    except SystemExit as exit_:  # argparse: --help, or an error it reported itself
        return int(exit_.code or 0)
    run(script_args, training_args, model_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

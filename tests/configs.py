"""`MultiConvGRPOConfig`s for CPU tests: the tiny model's window, no checkpoints, no loggers."""

from trl_memagent.config import MultiConvGRPOConfig

CPU_TINY = {
    "use_cpu": True,
    "bf16": False,
    "gradient_checkpointing": False,
    "report_to": [],
    "save_strategy": "no",
    "logging_steps": 1,
    "num_generations": 2,
    "chunk_tokens": 32,
    "memory_tokens": 8,
    "max_completion_length": 8,
}
# One plain SGD step with lr 1: the parameter update is minus the gradient, easy to compare across runs.
SGD_STEP = {
    "max_steps": 1,
    "optim": "sgd",
    "learning_rate": 1.0,
    "lr_scheduler_type": "constant",
    "max_grad_norm": 0.0,
    "seed": 7,
}


def cpu_config(output_dir, **overrides) -> MultiConvGRPOConfig:
    return MultiConvGRPOConfig(output_dir=str(output_dir), **{**CPU_TINY, **overrides})

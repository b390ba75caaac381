"""`MultiConvGRPOConfig`: TRL's `GRPOConfig` plus the memory agent's fields and the paper's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from .rollout import MemoryAgentConfig

# Loss types that reduce each row to a sequence mean or weight it by a per-row statistic: with one rollout
# spread over several rows (one per conversation), "a sequence" would silently become "a conversation".
_ROW_LEVEL_LOSSES = {
    "grpo": "it averages each row's tokens first, so every conversation (not every rollout) gets the same weight",
    "sapo": "it averages each row's tokens first, so every conversation (not every rollout) gets the same weight",
    "luspo": "it sums each row and averages over rows, so padding rows and the number of conversations change it",
    "bnpo": "it normalizes by the tokens of each local micro-batch, which depends on how rows are split",
    "dr_grpo": "it divides by rows x max_completion_length, but memory rows have another budget (memory_tokens) "
    "and rollouts have different numbers of rows",
    "vespo": "its importance weight is a per-row (per-conversation) sequence ratio, not a per-rollout one",
}


@dataclass
class MultiConvGRPOConfig(GRPOConfig):
    r"""Configuration of [`MultiConvGRPOTrainer`]: every `GRPOConfig` option plus the memory agent's.

    Defaults follow MemAgent (arXiv:2507.02259, released training scripts): DAPO token-level loss,
    advantage = reward - group mean (`scale_rewards="none"`), KL (k3) against the reference policy with
    coefficient 1e-3 and no importance weighting of the KL term, clip 0.2/0.2 and dual-clip 3 for negative
    advantages (`delta=3.0`, which TRL applies as a cap on the ratio: for a negative advantage that is exactly
    dual-clip, for a positive one it never binds because `delta > 1 + epsilon_high`). `max_completion_length`
    is the final-answer budget; memory updates use `memory_tokens`.
    """

    # Memory agent.
    chunk_tokens: int = field(default=5000, metadata={"help": "Document tokens read per memory-update turn."})
    memory_tokens: int = field(
        default=1024, metadata={"help": "Maximum new tokens of a memory update; bounds the memory by construction."}
    )
    question_max_tokens: int = field(
        default=1024, metadata={"help": "Longest question accepted, in tokens; a longer one is an error."}
    )
    max_chunks: int | None = field(
        default=None,
        metadata={"help": "Most chunks read per document (the paper trains with 8); None reads whole documents."},
    )
    truncation: str = field(
        default="center",
        metadata={
            "help": "Documents longer than max_chunks * chunk_tokens: 'center' keeps head and tail (the reference "
            "training), 'error' raises.",
            "choices": ["center", "error"],
        },
    )
    final_prompt: str = field(
        default="boxed",
        metadata={
            "help": "Final-answer template: 'boxed' (the paper's training prompt) or 'plain'.",
            "choices": ["boxed", "plain"],
        },
    )
    context_column: str = field(
        default="context", metadata={"help": "Dataset column holding the document each question is asked about."}
    )
    answers_column: str = field(
        default="answers",
        metadata={"help": "Dataset column with the gold answers, used for the lenient `sub_em` metric when present."},
    )
    conversation_weighting: str = field(
        default="token",
        metadata={
            "help": "'token' (the paper): each optimizer step is one token mean over every conversation, so rollouts "
            "with more chunks weigh more. 'trajectory': each token of rollout i weighs 1/n_i (n_i = its loss tokens), "
            "so every rollout weighs the same whatever its number of conversations.",
            "choices": ["token", "trajectory"],
        },
    )
    group_by_length: bool = field(
        default=True,
        metadata={
            "help": "Group rows of similar length into the same micro-batch (inside each optimizer step, where it "
            "does not change the result) to cut padding. False splits a plain shuffle."
        },
    )
    eval_temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature of the evaluation rollouts (paper validation: 1.0)."}
    )
    eval_top_p: float = field(
        default=0.7, metadata={"help": "Top-p of the evaluation rollouts (paper validation: 0.7)."}
    )

    # GRPOConfig fields whose defaults change to the paper's.
    max_completion_length: int | None = field(
        default=1024, metadata={"help": "Maximum new tokens of the final answer (the paper: 1024)."}
    )
    beta: float = field(
        default=1e-3,
        metadata={"help": "KL coefficient against the reference policy (the paper: 1e-3, k3 estimator)."},
    )
    scale_rewards: str = field(
        default="none",
        metadata={
            "help": "'none' (the paper, Dr.GRPO): advantage = reward - group mean. 'group' or 'batch' also divide "
            "by the group or batch standard deviation.",
            "choices": ["none", "group", "batch"],
        },
    )
    loss_type: str = field(
        default="dapo",
        metadata={
            "help": "Token-level losses only: 'dapo' (the paper) or 'cispo'. Losses that average per row do not "
            "fit rollouts spread over several rows (rejected with the reason)."
        },
    )
    delta: float | None = field(
        default=3.0,
        metadata={"help": "Cap on the probability ratio; for negative advantages this is dual-clip (the paper: 3)."},
    )
    vllm_importance_sampling_mode: str = field(
        default="token_truncate",
        metadata={
            "help": "Correction of the vLLM/trainer mismatch, per token: 'token_truncate' (clamp the ratio to "
            "[vllm_importance_sampling_clip_min, vllm_importance_sampling_clip_max]) or 'token_mask' (zero tokens "
            "outside). Sequence modes would act per conversation, not per rollout (rejected)."
        },
    )
    use_bias_correction_kl: bool = field(
        default=False,
        metadata={"help": "Multiply the KL term by the importance ratio (TRL's option); the paper does not."},
    )

    def __post_init__(self):
        super().__post_init__()
        self.memory_agent_config()  # validates the memory fields with the rollout's own checks
        if self.conversation_weighting not in ("token", "trajectory"):
            raise ValueError(
                f"conversation_weighting must be 'token' or 'trajectory', got {self.conversation_weighting!r}"
            )
        if not self.context_column:
            raise ValueError("context_column must name the dataset column that holds the documents")
        if self.loss_type in _ROW_LEVEL_LOSSES:
            raise ValueError(
                f"loss_type={self.loss_type!r} is not supported by multi-conversation GRPO: "
                f"{_ROW_LEVEL_LOSSES[self.loss_type]}. Use 'dapo' (the paper) or 'cispo'."
            )
        if self.importance_sampling_level != "token":
            raise ValueError(
                f"importance_sampling_level={self.importance_sampling_level!r} is not supported: a sequence-level "
                "ratio would be computed per conversation (row), not per rollout. Use 'token'."
            )
        if self.off_policy_mask_threshold is not None:
            raise ValueError(
                "off_policy_mask_threshold is not supported: its sequence-level KL would be computed per "
                "conversation (row), not per rollout. Leave it None."
            )
        if (
            self.use_vllm
            and self.vllm_importance_sampling_correction
            and "sequence" in self.vllm_importance_sampling_mode
        ):
            raise ValueError(
                f"vllm_importance_sampling_mode={self.vllm_importance_sampling_mode!r} is not supported: the sequence "
                "ratio would be per conversation, not per rollout. Use 'token_truncate' or 'token_mask'."
            )
        if self.use_transformers_continuous_batching:
            raise ValueError(
                "use_transformers_continuous_batching is not supported: the memory rollout drives generation itself "
                "(transformers `generate`, or vLLM with use_vllm=True)."
            )
        if self.steps_per_generation % self.gradient_accumulation_steps != 0:
            raise ValueError(
                f"steps_per_generation ({self.steps_per_generation}) must be a multiple of "
                f"gradient_accumulation_steps ({self.gradient_accumulation_steps}): each optimizer step must use "
                "rows of one generation batch only, so that it is an exact token mean over its micro-batches."
            )

    def memory_agent_config(self) -> MemoryAgentConfig:
        """The rollout's configuration; the final answer's budget is `max_completion_length`."""
        if self.max_completion_length is None:
            raise ValueError("max_completion_length (the final-answer budget) must be set")
        return MemoryAgentConfig(
            chunk_tokens=self.chunk_tokens,
            memory_tokens=self.memory_tokens,
            answer_tokens=self.max_completion_length,
            question_max_tokens=self.question_max_tokens,
            max_chunks=self.max_chunks,
            truncation=self.truncation,
            final_prompt=self.final_prompt,
        )

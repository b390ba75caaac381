"""vLLM generation backends for the trainer: TRL's server client and colocated engine, one request per turn.

The memory rollout calls `backend.generate(prompts, max_tokens)` once per turn. With several training
processes, a server request or a tensor-parallel colocated engine is a collective: every process must
take part in every turn. Documents differ in length, so processes differ in their number of memory turns:
a process with fewer turns takes part in the missing ones with no prompt, *before* its final turn, so the
final turns of all processes share one request (and one `max_tokens`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from accelerate.utils import broadcast_object_list, gather_object

from .backends import Generation


class _TurnAligned:
    """Issues `global_memory_turns - local_memory_turns` empty rounds right before the local final turn."""

    def __init__(self, local_memory_turns: int, global_memory_turns: int):
        if local_memory_turns > global_memory_turns:
            raise ValueError(
                f"local_memory_turns={local_memory_turns} exceeds global_memory_turns={global_memory_turns}"
            )
        self.local_memory_turns = local_memory_turns
        self.global_memory_turns = global_memory_turns
        self.calls = 0  # generate() calls of the local rollout
        self.rounds = 0  # collective rounds taken part in, empty ones included

    def generate(self, prompt_ids: list[list[int]], max_tokens: int) -> list[Generation]:
        if self.calls == self.local_memory_turns:  # the final turn: catch up with the other processes first
            for _ in range(self.global_memory_turns - self.local_memory_turns):
                self.rounds += 1
                self._round([], max_tokens)
        if self.calls > self.local_memory_turns:
            raise RuntimeError(f"backend called {self.calls + 1} times, expected {self.local_memory_turns + 1} turns")
        self.calls += 1
        self.rounds += 1
        return self._round(prompt_ids, max_tokens)

    def _round(self, prompt_ids: list[list[int]], max_tokens: int) -> list[Generation]:
        raise NotImplementedError


def sampled_logprobs(
    completion_ids: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[Sequence[float | None]]] | None,
    logprob_token_ids: Sequence[Sequence[Sequence[int]]] | None,
) -> list[list[float]] | None:
    """The logprob of each sampled token from vLLM's per-position (top-k sorted) lists; None becomes NaN.

    With `logprobs=0` each position holds only the sampled token; the token ids, when given, make sure
    the sampled one is picked even if more entries came back.
    """
    if logprobs is None:
        return None
    out = []
    for row, ids in enumerate(completion_ids):
        values = []
        for pos, token in enumerate(ids):
            entries = logprobs[row][pos]
            index = 0
            if logprob_token_ids is not None and token in logprob_token_ids[row][pos]:
                index = logprob_token_ids[row][pos].index(token)
            value = entries[index]
            values.append(float("nan") if value is None else value)
        out.append(values)
    return out


def to_generations(
    completion_ids: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float] | None] | None,
    max_tokens: int,
    eos_token_ids: set[int],
) -> list[Generation]:
    """vLLM outputs as `Generation`s with a finish reason.

    vLLM keeps the EOS token in `token_ids`, so a completion that ends with one stopped; one that fills
    `max_tokens` without it was cut.
    """
    out = []
    for row, ids in enumerate(completion_ids):
        ids = list(ids)
        stopped = bool(ids) and ids[-1] in eos_token_ids
        finish = "stop" if stopped or len(ids) < max_tokens else "length"
        row_logprobs = None if logprobs is None or logprobs[row] is None else list(logprobs[row])
        out.append(Generation(ids, row_logprobs, finish))
    return out


class VLLMServerBackend(_TurnAligned):
    """TRL's `VLLMClient` (server mode): prompts of all processes gathered, one request per turn on the main
    process, results broadcast and sliced back by offsets.

    `client` is the main process's `VLLMClient` (None elsewhere); `sampling` holds the request's sampling
    arguments (temperature, top_p, top_k, min_p, repetition_penalty, generation_kwargs).
    """

    def __init__(
        self,
        client,
        accelerator,
        sampling: dict,
        eos_token_ids: set[int],
        local_memory_turns: int,
        global_memory_turns: int,
    ):
        super().__init__(local_memory_turns, global_memory_turns)
        if accelerator.is_main_process and client is None:
            raise ValueError("the main process needs the VLLMClient")
        self.client = client
        self.accelerator = accelerator
        self.sampling = sampling
        self.eos_token_ids = eos_token_ids

    def _round(self, prompt_ids: list[list[int]], max_tokens: int) -> list[Generation]:
        requests = gather_object([(list(map(list, prompt_ids)), max_tokens)])
        payload = None
        if self.accelerator.is_main_process:
            prompts = [p for ids, _ in requests for p in ids]
            budgets = {budget for ids, budget in requests if ids}
            if len(budgets) > 1:
                raise RuntimeError(f"processes are at turns with different max_tokens {sorted(budgets)}")
            if prompts:
                output = self.client.generate(
                    prompts=prompts, n=1, max_tokens=budgets.pop(), logprobs=0, **self.sampling
                )
                payload = (
                    output["completion_ids"],
                    sampled_logprobs(output["completion_ids"], output["logprobs"], output.get("logprob_token_ids")),
                )
            else:
                payload = ([], None)
        box = [payload]
        broadcast_object_list(box, from_process=0)
        completion_ids, logprobs = box[0]
        start = sum(len(ids) for ids, _ in requests[: self.accelerator.process_index])
        local = slice(start, start + len(prompt_ids))
        return to_generations(
            completion_ids[local], None if logprobs is None else logprobs[local], max_tokens, self.eos_token_ids
        )


class VLLMColocateBackend(_TurnAligned):
    """A vLLM engine in the training process (TRL's colocate mode): `llm.generate` on token-id prompts.

    With tensor parallelism the ranks of a group share one engine: their prompts are gathered in the group
    (every rank generates all of them, with the same seed) and each keeps its own slice, as TRL does.
    """

    def __init__(
        self,
        llm,
        sampling: dict,
        eos_token_ids: set[int],
        local_memory_turns: int,
        global_memory_turns: int,
        tp_group=None,
    ):
        super().__init__(local_memory_turns, global_memory_turns)
        self.llm = llm
        self.sampling = sampling
        self.eos_token_ids = eos_token_ids
        self.tp_group = tp_group

    def _round(self, prompt_ids: list[list[int]], max_tokens: int) -> list[Generation]:
        from vllm import SamplingParams

        prompts, start = [list(p) for p in prompt_ids], 0
        if self.tp_group is not None:
            groups: list = [None] * torch.distributed.get_world_size(group=self.tp_group)
            torch.distributed.all_gather_object(groups, prompts, group=self.tp_group)
            start = sum(len(g) for g in groups[: torch.distributed.get_rank(group=self.tp_group)])
            prompts = [p for g in groups for p in g]
        if not prompts:
            return []
        params = SamplingParams(**{"n": 1, "max_tokens": max_tokens, "logprobs": 0, **self.sampling})
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sampling_params=params, use_tqdm=False)
        completion_ids = [list(o.outputs[0].token_ids) for o in outputs]
        logprobs = [
            _sampled_logprobs(o.outputs[0].logprobs, ids) for o, ids in zip(outputs, completion_ids, strict=True)
        ]
        local = slice(start, start + len(prompt_ids))
        return to_generations(completion_ids[local], logprobs[local], max_tokens, self.eos_token_ids)


def _sampled_logprobs(position_logprobs: list[dict] | None, token_ids: list[int]) -> list[float] | None:
    """Sampled-token logprobs from vLLM's per-position {token_id: Logprob} dicts (NaN stays NaN)."""
    if position_logprobs is None:
        return None
    return [float(position[token].logprob) for position, token in zip(position_logprobs, token_ids, strict=True)]


@contextlib.contextmanager
def colocate_session(vllm_generation) -> Iterator[None]:
    """Keep a sleeping colocated engine awake for a whole rollout (all its turns), then put it back to sleep.

    Mirrors `VLLMGeneration.generate`, which wakes and sleeps around every call: level-2 sleep drops the
    weights, so they are pushed again from the training model before waking the KV cache.
    """
    if not vllm_generation.enable_sleep_mode:
        yield
        return
    if vllm_generation._llm_weights_sleeping:
        vllm_generation.sync_weights()  # wakes the weights and loads the current training weights
    vllm_generation.llm.wake_up(tags=["kv_cache"])
    try:
        yield
    finally:
        vllm_generation.llm.sleep(level=2)
        vllm_generation._llm_weights_sleeping = True

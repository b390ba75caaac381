"""The vLLM server backend on 2 CPU processes (gloo), against a STAND-IN for TRL's `VLLMClient` (vLLM needs a GPU).

Run by tests/test_vllm_backends.py as `torchrun --standalone --nproc_per_node 2 tests/dist_vllm_server.py OUT_DIR`.
The processes hold different numbers of samples and of memory turns. Each runs the real `MemoryAgent` with
`VLLMServerBackend`; rank 0 holds the stand-in client, which answers deterministically from the prompt and
records every request. Each rank also reruns its own samples with the same deterministic answers served
locally, and writes whether the two agree (the gathered/broadcast/sliced path must give the same result).
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from accelerate import PartialState  # noqa: E402
from accelerate.utils import gather_object  # noqa: E402

from trl_memagent.backends import Generation  # noqa: E402
from trl_memagent.chunking import chunk_document, tokenize_document  # noqa: E402
from trl_memagent.rollout import MemoryAgent, MemoryAgentConfig  # noqa: E402
from trl_memagent.tiny import build_tiny_tokenizer, filler_text  # noqa: E402
from trl_memagent.vllm_backends import VLLMServerBackend  # noqa: E402


def stand_in_completion(prompt: list[int], max_tokens: int, eos: int) -> tuple[list[int], list[float]]:
    """Deterministic answer of the stand-in: depends on the prompt only; some stop with EOS, some hit the limit."""
    length = 2 + (sum(prompt) + len(prompt)) % (max_tokens + 1)
    ids = [(sum(prompt) * 7 + 13 * k) % 300 + 5 for k in range(min(length, max_tokens))]
    if length < max_tokens:
        ids.append(eos)
    return ids, [-0.01 * (k + 1) for k in range(len(ids))]


class StandInVLLMClient:
    """STAND-IN for `trl.generation.vllm_client.VLLMClient.generate` (same arguments and output format)."""

    def __init__(self, eos: int):
        self.eos = eos
        self.calls = []

    def generate(self, prompts, n=1, max_tokens=16, logprobs=0, **sampling):
        assert n == 1 and logprobs == 0 and prompts, (n, logprobs, len(prompts))
        self.calls.append({"num_prompts": len(prompts), "max_tokens": max_tokens, "sampling": sampling})
        outputs = [stand_in_completion(p, max_tokens, self.eos) for p in prompts]
        return {
            "prompt_ids": prompts,
            "completion_ids": [ids for ids, _ in outputs],
            "logprobs": [[[lp] for lp in lps] for _, lps in outputs],
            "logprob_token_ids": [[[t] for t in ids] for ids, _ in outputs],
        }


class LocalDeterministicBackend:
    """The same answers as the stand-in, served in-process: the reference the distributed path must reproduce."""

    def __init__(self, eos: int):
        self.eos = eos

    def generate(self, prompt_ids, max_tokens):
        out = []
        for prompt in prompt_ids:
            ids, lps = stand_in_completion(prompt, max_tokens, self.eos)
            out.append(Generation(ids, lps, "stop" if ids[-1] == self.eos else "length"))
        return out


def main(out_dir: str) -> None:
    state = PartialState(cpu=True)
    tokenizer = build_tiny_tokenizer()
    eos = tokenizer.eos_token_id
    config = MemoryAgentConfig(chunk_tokens=32, memory_tokens=6, answer_tokens=9)
    # Rank 0: three samples with 1-chunk documents; rank 1: two samples with 3- and 2-chunk documents.
    if state.process_index == 0:
        questions, documents = ["q a", "q b", "q c"], [filler_text(10, s) for s in (1, 2, 3)]
    else:
        questions, documents = ["q d", "q e"], [filler_text(60, 4), filler_text(35, 5)]
    local_turns = max(len(chunk_document(tokenize_document(tokenizer, d), 32)) for d in documents)
    global_turns = max(gather_object([local_turns]))
    client = StandInVLLMClient(eos) if state.is_main_process else None
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
    backend = VLLMServerBackend(client, state, sampling, {eos}, local_turns, global_turns)
    distributed = MemoryAgent(backend, tokenizer, config).run(questions, documents)
    local = MemoryAgent(LocalDeterministicBackend(eos), tokenizer, config).run(questions, documents)
    report = {
        "rank": state.process_index,
        "local_turns": local_turns,
        "global_turns": global_turns,
        "backend_calls": backend.calls,
        "rounds": backend.rounds,
        "samples": len(questions),
        "same_as_local": [d.__dict__ == lo.__dict__ for d, lo in zip(distributed, local, strict=True)],
        "conversations": [len(t.conversations) for t in distributed],
        "has_logprobs": all(c.logprobs is not None for t in distributed for c in t.conversations),
        "finish_reasons": sorted({c.finish_reason for t in distributed for c in t.conversations}),
        "requests": client.calls if client else None,
    }
    with open(os.path.join(out_dir, f"rank{state.process_index}.json"), "w") as f:
        json.dump(report, f)
    # Tear the gloo group down explicitly: left to the interpreter's exit, it once aborted a process in CI
    # ("terminate called without an active exception").
    state.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

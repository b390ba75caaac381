"""Generation backends: where the memory agent's turns are sampled.

Every backend answers one call per turn for a whole batch of conversations, with token-id prompts and
a per-call token budget, so the rollout (and the trainer's vLLM backends) can treat them alike.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import httpx

FinishReason = Literal["stop", "length"]


@dataclass
class Generation:
    """One sampled completion. `completion_ids` ends with EOS when `finish_reason == "stop"`."""

    completion_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: FinishReason = "stop"


@runtime_checkable
class GenerationBackend(Protocol):
    def generate(self, prompt_ids: list[list[int]], max_tokens: int) -> list[Generation]: ...


class BackendError(RuntimeError):
    """A backend could not produce completions (bad request, bad key, unreachable server...)."""


class TransformersBackend:
    """Batched `model.generate` with left padding; each row is cut after its first EOS.

    Logprobs are those of the sampling distribution (after temperature/top-p), as vLLM's
    `processed_logprobs` mode returns them, so they can feed importance-sampling corrections.
    """

    def __init__(
        self,
        model,
        tokenizer,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int | None = None,
        do_sample: bool = True,
        batch_size: int | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = {"do_sample": do_sample}
        if do_sample:
            self.sampling.update(temperature=temperature, top_p=top_p, top_k=top_k or 0)
        self.batch_size = batch_size
        eos = tokenizer.eos_token_id
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        self.eos_token_ids = {eos} | _as_set(getattr(model.generation_config, "eos_token_id", None))

    def generate(self, prompt_ids: list[list[int]], max_tokens: int) -> list[Generation]:
        # Sorting by length keeps the padding of each sub-batch small; results go back in input order.
        order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
        size = self.batch_size or max(len(order), 1)
        results: list[Generation | None] = [None] * len(prompt_ids)
        for start in range(0, len(order), size):
            batch = order[start : start + size]
            for index, generation in zip(batch, self._generate_batch([prompt_ids[i] for i in batch], max_tokens)):
                results[index] = generation
        return results  # type: ignore[return-value]

    def _generate_batch(self, prompts: list[list[int]], max_tokens: int) -> list[Generation]:
        import torch

        device = self.model.device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                max_new_tokens=max_tokens,
                pad_token_id=self.pad_token_id,
                eos_token_id=sorted(self.eos_token_ids),
                return_dict_in_generate=True,
                output_scores=True,
                **self.sampling,
            )
        new_tokens = out.sequences[:, width:].cpu()
        scores = torch.stack(out.scores, dim=1).float().log_softmax(-1)  # (rows, steps, vocab)
        token_logprobs = scores.gather(-1, new_tokens.to(scores.device).unsqueeze(-1)).squeeze(-1).cpu()
        generations = []
        for row in range(len(prompts)):
            ids = new_tokens[row].tolist()
            stop = next((i for i, t in enumerate(ids) if t in self.eos_token_ids), None)
            end = len(ids) if stop is None else stop + 1
            generations.append(
                Generation(
                    completion_ids=ids[:end],
                    logprobs=token_logprobs[row, :end].tolist(),
                    finish_reason="length" if stop is None else "stop",
                )
            )
        return generations


def _as_set(value) -> set[int]:
    if value is None:
        return set()
    return set(value) if isinstance(value, list | tuple) else {value}


class OpenAIBackend:
    """Any OpenAI-compatible server (`vllm serve`, `transformers serve`, hosted APIs) via /v1/completions.

    The chat template is applied client-side (prompts arrive as token ids), so the server sees exactly
    the prompt the agent built. `prompt_format="text"` decodes prompts to text, which every server
    accepts; `"token_ids"` sends the ids themselves (vLLM), avoiding a decode/re-encode round trip.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer,
        api_key: str | None = None,
        temperature: float = 0.7,
        top_p: float = 0.95,
        max_concurrency: int = 16,
        timeout: float = 600.0,
        max_retries: int = 4,
        backoff: float = 1.0,
        prompt_format: Literal["text", "token_ids"] = "text",
    ):
        if prompt_format not in ("text", "token_ids"):
            raise ValueError(f"prompt_format must be 'text' or 'token_ids', got {prompt_format!r}")
        self.url = base_url.rstrip("/") + ("" if base_url.rstrip("/").endswith("/v1") else "/v1") + "/completions"
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = {"temperature": temperature, "top_p": top_p}
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.backoff = backoff
        self.prompt_format = prompt_format
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(
            headers=headers,
            timeout=timeout,
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )

    def generate(self, prompt_ids: list[list[int]], max_tokens: int) -> list[Generation]:
        if not prompt_ids:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompt_ids))) as pool:
            return list(pool.map(lambda ids: self._complete(ids, max_tokens), prompt_ids))

    def _complete(self, prompt_ids: list[int], max_tokens: int) -> Generation:
        prompt = prompt_ids if self.prompt_format == "token_ids" else self.tokenizer.decode(prompt_ids)
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, **self.sampling}
        choice = self._post(body)["choices"][0]
        completion_ids = self.tokenizer.encode(choice["text"], add_special_tokens=False)
        finish_reason: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
        if finish_reason == "stop" and self.tokenizer.eos_token_id is not None:
            completion_ids.append(self.tokenizer.eos_token_id)
        return Generation(completion_ids=completion_ids, logprobs=None, finish_reason=finish_reason)

    def _post(self, body: dict) -> dict:
        for attempt in range(self.max_retries + 1):
            try:
                response = self.client.post(self.url, json=body)
            except (httpx.TimeoutException, httpx.TransportError) as error:
                failure = f"cannot reach {self.url} ({type(error).__name__}: {error})"
            else:
                if response.status_code < 400:
                    return response.json()
                if response.status_code in (401, 403):
                    raise BackendError(
                        f"{self.url} refused the API key (HTTP {response.status_code}): {response.text}"
                    )
                if response.status_code < 500 and response.status_code != 429:
                    raise BackendError(
                        f"{self.url} rejected the request (HTTP {response.status_code}): {response.text}"
                    )
                failure = f"{self.url} answered HTTP {response.status_code}: {response.text[:500]}"
            if attempt < self.max_retries:
                time.sleep(self.backoff * 2**attempt * (0.5 + random.random()))
        raise BackendError(f"{failure}; gave up after {self.max_retries + 1} attempts")

    def close(self) -> None:
        self.client.close()

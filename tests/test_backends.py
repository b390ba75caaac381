import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from servers import free_port, transformers_serve
from transformers import AutoTokenizer

from trl_memagent import BackendError, MemoryAgent, MemoryAgentConfig, OpenAIBackend, TransformersBackend
from trl_memagent.tiny import filler_text


def encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def test_greedy_batched_generation_matches_one_by_one_and_logprobs_match_a_forward(tiny_model, tiny_tokenizer):
    backend = TransformersBackend(tiny_model, tiny_tokenizer, do_sample=False)
    prompts = [encode(tiny_tokenizer, filler_text(n, seed=n)) for n in (3, 20, 9)]
    batched = backend.generate(prompts, 7)
    alone = [backend.generate([p], 7)[0] for p in prompts]
    assert [g.completion_ids for g in batched] == [g.completion_ids for g in alone]
    for prompt, generation in zip(prompts, batched):
        ids = torch.tensor([prompt + generation.completion_ids])
        with torch.no_grad():
            logits = tiny_model(ids).logits[0, len(prompt) - 1 : -1].float()
        expected = logits.log_softmax(-1).gather(-1, ids[0, len(prompt) :, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)
        assert generation.finish_reason == "length" and len(generation.completion_ids) == 7


def test_each_row_stops_after_its_first_eos(tiny_model, tiny_tokenizer):
    prompts = [encode(tiny_tokenizer, filler_text(n, seed=n)) for n in (4, 11)]
    free_run = TransformersBackend(tiny_model, tiny_tokenizer, do_sample=False).generate(prompts, 8)
    # Declare the token row 0 greedily emits third to be an end-of-sequence token of a copy of the model.
    stop_token = free_run[0].completion_ids[2]
    model = copy.deepcopy(tiny_model)
    model.generation_config.eos_token_id = [tiny_tokenizer.eos_token_id, stop_token]
    stopped = TransformersBackend(model, tiny_tokenizer, do_sample=False).generate(prompts, 8)
    first = free_run[0].completion_ids.index(stop_token)
    assert stopped[0].completion_ids == free_run[0].completion_ids[: first + 1]
    assert stopped[0].finish_reason == "stop" and len(stopped[0].logprobs) == first + 1
    if stop_token not in free_run[1].completion_ids:
        assert stopped[1].completion_ids == free_run[1].completion_ids and stopped[1].finish_reason == "length"


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with transformers_serve(tiny_model_dir) as (base_url, process):
        yield base_url, tiny_model_dir


def test_openai_backend_runs_the_agent_against_transformers_serve(server):
    base_url, model_dir = server
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    backend = OpenAIBackend(base_url, model_dir, tokenizer, max_concurrency=4)
    generations = backend.generate([encode(tokenizer, "hello"), encode(tokenizer, filler_text(30))], 5)
    assert len(generations) == 2
    assert all(g.finish_reason == "length" and g.completion_ids for g in generations)
    agent = MemoryAgent(backend, tokenizer, MemoryAgentConfig(chunk_tokens=40, memory_tokens=6, answer_tokens=6))
    trajectories = agent.run(["Which river?", "Which king?"], [filler_text(60), filler_text(10)])
    assert [t.num_chunks for t in trajectories] == [-(-len(encode(tokenizer, filler_text(n))) // 40) for n in (60, 10)]
    assert all(t.memories and isinstance(t.answer, str) for t in trajectories)


def test_openai_backend_rejects_a_bad_request_without_retrying(server):
    base_url, model_dir = server
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # transformers serve takes only text prompts: token ids are a client error (HTTP 400), not retried.
    backend = OpenAIBackend(base_url, model_dir, tokenizer, max_retries=3, backoff=5.0, prompt_format="token_ids")
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"rejected the request \(HTTP 400\).*prompt must be a string"):
        backend.generate([encode(tokenizer, "hello")], 4)
    assert time.monotonic() - start < 5.0  # no backoff sleep: 4xx is final


def test_unreachable_server_fails_with_a_clear_message(tiny_tokenizer):
    backend = OpenAIBackend(f"http://127.0.0.1:{free_port()}/v1", "m", tiny_tokenizer, max_retries=1, backoff=0.01)
    with pytest.raises(BackendError, match=r"cannot reach http://127.0.0.1:\d+/v1/completions.*after 2 attempts"):
        backend.generate([[1, 2, 3]], 4)


class FlakyHandler(BaseHTTPRequestHandler):
    """Answers 503 to the first requests, then a valid completion; records what it received."""

    failures_left = 2
    bodies: list[dict] = []
    headers_seen: list[str] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        type(self).headers_seen.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != "Bearer good-key":
            return self._reply(401, {"error": "invalid api key"})
        if type(self).failures_left > 0:
            type(self).failures_left -= 1
            return self._reply(503, {"error": "overloaded"})
        self._reply(200, {"choices": [{"text": " Paris", "finish_reason": "stop"}]})

    def _reply(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def flaky_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
    FlakyHandler.failures_left, FlakyHandler.bodies, FlakyHandler.headers_seen = 2, [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_5xx_is_retried_with_backoff_and_token_ids_are_sent_as_is(flaky_server, tiny_tokenizer):
    backend = OpenAIBackend(
        flaky_server, "m", tiny_tokenizer, api_key="good-key", backoff=0.01, prompt_format="token_ids"
    )
    (generation,) = backend.generate([[5, 6, 7]], 4)
    assert len(FlakyHandler.bodies) == 3 and FlakyHandler.bodies[-1]["prompt"] == [5, 6, 7]
    assert FlakyHandler.bodies[-1]["max_tokens"] == 4 and FlakyHandler.bodies[-1]["temperature"] == 0.7
    assert generation.completion_ids == encode(tiny_tokenizer, " Paris") + [tiny_tokenizer.eos_token_id]
    assert generation.finish_reason == "stop"


def test_a_bad_api_key_is_reported_as_such(flaky_server, tiny_tokenizer):
    backend = OpenAIBackend(flaky_server, "m", tiny_tokenizer, api_key="wrong", backoff=0.01)
    with pytest.raises(BackendError, match=r"refused the API key \(HTTP 401\)"):
        backend.generate([[5]], 4)
    assert FlakyHandler.headers_seen == ["Bearer wrong"]


def test_answer_cli_against_a_server(server, tmp_path, capsys):
    from trl_memagent.cli import main

    base_url, model_dir = server
    document = tmp_path / "doc.txt"
    document.write_text(filler_text(200), encoding="utf-8")
    args = ["answer", "--model", model_dir, "--base-url", base_url, "--document", str(document)]
    args += ["--question", "Which city?", "--chunk-tokens", "100", "--memory-tokens", "4", "--answer-tokens", "4"]
    assert main(args + ["--show-memory"]) == 0
    assert "--- memory after chunk 1/" in capsys.readouterr().out

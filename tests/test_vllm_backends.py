"""vLLM backends on CPU: vLLM itself needs a GPU, so TRL's `VLLMClient` / `VLLMGeneration` are replaced by
clearly labelled STAND-INS; everything else (gather, one request per turn, broadcast, slicing, weight-sync
schedule, importance-sampling correction in the trainer) is the real code. `scripts/gpu_check.sh` runs the
real thing on a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from configs import cpu_config
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_memagent.backends import TransformersBackend
from trl_memagent.rollout import MemoryAgent, MemoryAgentConfig
from trl_memagent.tiny import filler_text
from trl_memagent.trainer import MultiConvGRPOTrainer
from trl_memagent.vllm_backends import VLLMColocateBackend, colocate_session, sampled_logprobs, to_generations

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from dist_vllm_server import LocalDeterministicBackend, stand_in_completion  # noqa: E402


def test_server_backend_on_two_processes_with_unequal_prompts(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = subprocess.run(
        [*command, str(HERE / "dist_vllm_server.py"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # Rank 0: 3 samples, 1 memory turn each; rank 1: 2 samples with 3 and 2 memory turns.
    assert (rank0["local_turns"], rank1["local_turns"], rank0["global_turns"]) == (1, 3, 3)
    # One request per turn on the main process: 3 memory turns then the final turn, all processes together.
    assert [r["num_prompts"] for r in rank0["requests"]] == [3 + 2, 0 + 2, 0 + 1, 3 + 2]
    assert [r["max_tokens"] for r in rank0["requests"]] == [6, 6, 6, 9]
    # Every process took part in every round (rank 0 with empty prompt lists before its final turn) ...
    assert rank0["rounds"] == rank1["rounds"] == 4 and (rank0["backend_calls"], rank1["backend_calls"]) == (2, 4)
    # ... and got back exactly its own completions: same trajectories as serving the same answers locally.
    assert rank0["same_as_local"] == [True] * 3 and rank1["same_as_local"] == [True] * 2
    assert rank1["conversations"] == [4, 3]
    assert rank0["has_logprobs"] and rank1["has_logprobs"]
    assert rank0["finish_reasons"] == ["length", "stop"]


def test_sampled_logprobs_and_finish_reasons():
    completion_ids = [[5, 9, 2], [7]]
    # Position lists sorted by probability; the sampled token is not always first when more came back.
    logprobs = [[[-0.1], [-0.2, -0.7], [None]], [[-1.5]]]
    token_ids = [[[5], [3, 9], [2]], [[7]]]
    values = sampled_logprobs(completion_ids, logprobs, token_ids)
    assert values[0][:2] == [-0.1, -0.7] and values[0][2] != values[0][2] and values[1] == [-1.5]
    assert sampled_logprobs(completion_ids, None, None) is None
    gens = to_generations([[5, 9, 2], [7, 8, 4], [7]], None, max_tokens=3, eos_token_ids={2})
    assert [g.finish_reason for g in gens] == ["stop", "length", "stop"]


class StandInLLM:
    """STAND-IN for `vllm.LLM` (colocate mode): deterministic answers with vLLM's output objects."""

    def __init__(self, eos):
        self.eos, self.calls, self.events = eos, [], []

    def generate(self, prompts, sampling_params, use_tqdm):
        self.calls.append((len(prompts), sampling_params["max_tokens"]))
        outputs = []
        for prompt in prompts:
            ids, lps = stand_in_completion(prompt["prompt_token_ids"], sampling_params["max_tokens"], self.eos)
            logprobs = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(ids, lps, strict=True)]
            outputs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, logprobs=logprobs)]))
        return outputs

    def wake_up(self, tags):
        self.events.append(("wake", tuple(tags)))

    def sleep(self, level):
        self.events.append(("sleep", level))


def test_colocate_backend_and_sleep_session(monkeypatch, tiny_tokenizer):
    # vLLM is not installed on CPU machines: SamplingParams is stood in by a plain dict of its arguments.
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: kw))
    eos = tiny_tokenizer.eos_token_id
    config = MemoryAgentConfig(chunk_tokens=32, memory_tokens=6, answer_tokens=9)
    questions, documents = ["q a", "q b"], [filler_text(10, 1), filler_text(40, 2)]
    llm = StandInLLM(eos)
    sampling = {"temperature": 0.7, "top_p": 0.9}
    # This process has 2 memory turns but another one has 4: the colocated engine is local, so the two
    # empty rounds before the final turn send nothing.
    backend = VLLMColocateBackend(llm, sampling, {eos}, local_memory_turns=2, global_memory_turns=4)
    trajectories = MemoryAgent(backend, tiny_tokenizer, config).run(questions, documents)
    assert llm.calls == [(2, 6), (1, 6), (2, 9)] and (backend.calls, backend.rounds) == (3, 5)
    expected = MemoryAgent(LocalDeterministicBackend(eos), tiny_tokenizer, config).run(questions, documents)
    assert [t.__dict__ for t in trajectories] == [t.__dict__ for t in expected]

    generation = SimpleNamespace(enable_sleep_mode=True, _llm_weights_sleeping=True, llm=llm, syncs=0)

    def sync_weights():  # what VLLMGeneration.sync_weights does with sleep mode: wake the weights, load them
        generation.syncs += 1
        llm.wake_up(tags=["weights"])
        generation._llm_weights_sleeping = False

    generation.sync_weights = sync_weights
    llm.events.clear()
    with colocate_session(generation):
        assert llm.events == [("wake", ("weights",)), ("wake", ("kv_cache",))]
    assert llm.events[-1] == ("sleep", 2) and generation._llm_weights_sleeping and generation.syncs == 1


class StandInVLLMClient:
    """STAND-IN for `VLLMClient.generate` in server mode: samples with the trainer's own model, returning
    processed logprobs in vLLM's format (so the trainer's importance ratio must come out at 1)."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self.requests = []

    def generate(self, prompts, n, max_tokens, logprobs, temperature, top_p, top_k, **kwargs):
        self.requests.append(len(prompts))
        backend = TransformersBackend(self.model, self.tokenizer, temperature=temperature, top_p=top_p, top_k=top_k)
        gens = backend.generate(prompts, max_tokens)
        return {
            "prompt_ids": prompts,
            "completion_ids": [g.completion_ids for g in gens],
            "logprobs": [[[lp] for lp in g.logprobs] for g in gens],
            "logprob_token_ids": [[[t] for t in g.completion_ids] for g in gens],
        }


class StandInVLLMGeneration:
    """STAND-IN for `trl.generation.vllm_generation.VLLMGeneration` (server mode): counts weight syncs."""

    def __init__(self, client):
        self.vllm_client = client
        self.syncs = 0

    def sync_weights(self):
        self.syncs += 1


def test_trainer_server_path_syncs_weights_and_corrects_with_sampling_logprobs(tiny_model_dir, tmp_path):
    from datasets import Dataset

    args = cpu_config(
        tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=1, max_steps=2, learning_rate=1e-3
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    trainer = MultiConvGRPOTrainer(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        reward_funcs=lambda completion_ids, **kw: [float(ids[0] % 2) for ids in completion_ids],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["Which river?"], "context": [filler_text(50, 3)]}),
        processing_class=tokenizer,
    )
    # What `use_vllm=True, vllm_mode="server"` sets up in GRPOTrainer.__init__, with the stand-ins.
    client = StandInVLLMClient(trainer.model, tokenizer)
    trainer.use_vllm, trainer.vllm_mode, trainer._last_loaded_step = True, "server", -1
    trainer.vllm_generation = StandInVLLMGeneration(client)
    trainer.train()

    assert trainer.vllm_generation.syncs == 2  # once per optimizer step (global_step 0 and 1), on every process
    turns = len(trainer._buffered_inputs[0]["prompt_ids"]) // 2  # rows = 2 rollouts x (chunks + 1)
    assert client.requests == [2] * turns * 2  # one request per turn, both rollouts in it, for each of 2 steps
    batch = trainer._buffered_inputs[0]
    ratio = batch["importance_sampling_ratio"][batch["completion_mask"].bool()]
    assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-3), ratio
    logs = [h for h in trainer.state.log_history if "sampling/importance_sampling_ratio/mean" in h]
    assert len(logs) == 2 and abs(logs[0]["sampling/importance_sampling_ratio/mean"] - 1) < 1e-3

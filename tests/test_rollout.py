from unittest import mock

import pytest

import trl_memagent.rollout as rollout_module
from trl_memagent import Generation, MemoryAgent, MemoryAgentConfig, TransformersBackend
from trl_memagent.templates import INITIAL_MEMORY, MEMORY_TEMPLATE
from trl_memagent.tiny import filler_text

C = 32  # chunk tokens


class CountingBackend:
    """Wraps a real backend and records every call (how many prompts, which budget)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, prompt_ids, max_tokens):
        self.calls.append((len(prompt_ids), max_tokens))
        return self.inner.generate(prompt_ids, max_tokens)


class ScriptedBackend:
    """Returns completions built by the test (a random tiny model never emits EOS on its own)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.turn, self.prompts = tokenizer, 0, []

    def generate(self, prompt_ids, max_tokens):
        self.prompts.append(prompt_ids)
        self.turn += 1
        out = []
        for row in range(len(prompt_ids)):
            ids = self.tokenizer.encode(f" fact {self.turn} row {row}", add_special_tokens=False)
            out.append(Generation(ids + [self.tokenizer.eos_token_id], [0.0] * (len(ids) + 1), "stop"))
        return out


def encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def find(sequence, sub):
    return next(i for i in range(len(sequence) - len(sub) + 1) if sequence[i : i + len(sub)] == sub)


@pytest.fixture()
def agent_factory(tiny_model, tiny_tokenizer):
    def make(**config):
        backend = CountingBackend(TransformersBackend(tiny_model, tiny_tokenizer, temperature=1.0))
        defaults = dict(chunk_tokens=C, memory_tokens=6, answer_tokens=5)
        return MemoryAgent(backend, tiny_tokenizer, MemoryAgentConfig(**{**defaults, **config})), backend

    return make


def test_conversations_and_backend_calls_per_rollout(agent_factory, tiny_tokenizer):
    agent, backend = agent_factory()
    documents = [filler_text(n, seed=n) for n in (150, 40, 5)]
    num_chunks = [-(-len(encode(tiny_tokenizer, d)) // C) for d in documents]
    trajectories = agent.run(["Which city?"] * 3, documents)
    K = max(num_chunks)
    assert len(backend.calls) == K + 1
    # Turn k sends every input whose document still has a chunk k, all in one call; the last sends all.
    assert [n for n, _ in backend.calls] == [sum(k < n for n in num_chunks) for k in range(K)] + [3]
    assert [budget for _, budget in backend.calls] == [6] * K + [5]
    for trajectory, n in zip(trajectories, num_chunks):
        assert len(trajectory.conversations) == n + 1 == trajectory.num_chunks + 1
        assert [c.kind for c in trajectory.conversations] == ["memory"] * n + ["final"]
        assert [c.chunk_index for c in trajectory.conversations] == list(range(n)) + [None]
        assert len(trajectory.memories) == n
        # The random model never stops: every memory is cut at the budget, kept and flagged.
        for conversation in trajectory.conversations[:-1]:
            assert len(conversation.completion_ids) == 6 and conversation.finish_reason == "length"
            assert len(conversation.logprobs) == 6


def test_chunk_ids_inside_prompt_k_are_the_documents_slice(agent_factory, tiny_tokenizer):
    agent, _ = agent_factory()
    document = filler_text(120, seed=7)
    doc_ids = encode(tiny_tokenizer, document)
    (trajectory,) = agent.run(["Who directed the film?"], [document])
    suffix = encode(tiny_tokenizer, "\n</section>\n\nUpdated memory:\n<|im_end|>\n<|im_start|>assistant\n")
    for k, conversation in enumerate(trajectory.conversations[:-1]):
        expected = doc_ids[k * C : (k + 1) * C]
        prompt = conversation.prompt_ids
        assert prompt[len(prompt) - len(suffix) :] == suffix
        assert prompt[len(prompt) - len(suffix) - len(expected) : len(prompt) - len(suffix)] == expected


def test_each_memory_prompt_carries_the_previous_completion_without_eos(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer)
    agent = MemoryAgent(backend, tiny_tokenizer, MemoryAgentConfig(chunk_tokens=C, memory_tokens=16, answer_tokens=8))
    question, document = "What is the key?", filler_text(100, seed=1)
    (trajectory,) = agent.run([question], [document])
    memory_close = encode(tiny_tokenizer, "\n</memory>\n\n<section>\n")
    final_close = encode(tiny_tokenizer, "\n</memory>\n\nYour answer:")
    eos = tiny_tokenizer.eos_token_id
    conversations = trajectory.conversations
    for previous, current in zip(conversations, conversations[1:]):
        memory = previous.completion_ids[:-1]
        assert previous.completion_ids[-1] == eos and eos not in memory
        close = memory_close if current.kind == "memory" else final_close
        position = find(current.prompt_ids, memory + close)
        assert position > 0
    first_memory = encode(tiny_tokenizer, INITIAL_MEMORY)
    assert find(conversations[0].prompt_ids, first_memory + memory_close) > 0
    # The readable trace is the decoded memory, and decoding prompt 1 gives the rendered template.
    assert trajectory.memories[0] == " fact 1 row 0"
    chunk_text = tiny_tokenizer.decode(encode(tiny_tokenizer, document)[C : 2 * C])
    rendered = MEMORY_TEMPLATE.format(prompt=question, memory=trajectory.memories[0], chunk=chunk_text)
    expected = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": rendered}], tokenize=False, add_generation_prompt=True
    )
    assert tiny_tokenizer.decode(conversations[1].prompt_ids) == expected
    assert trajectory.answer == f" fact {len(conversations)} row 0"


def test_empty_document_goes_straight_to_the_final_turn(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer)
    agent = MemoryAgent(backend, tiny_tokenizer, MemoryAgentConfig(chunk_tokens=C, memory_tokens=8, answer_tokens=8))
    (trajectory,) = agent.run(["Q?"], [""])
    assert [c.kind for c in trajectory.conversations] == ["final"] and trajectory.memories == []
    assert len(backend.prompts) == 1
    assert "<memory>\nNo previous memory\n</memory>" in tiny_tokenizer.decode(trajectory.conversations[0].prompt_ids)


def test_document_shorter_than_a_chunk_takes_one_memory_turn(agent_factory):
    agent, backend = agent_factory()
    (trajectory,) = agent.run(["Q?"], ["A short document."])
    assert [c.kind for c in trajectory.conversations] == ["memory", "final"] and len(backend.calls) == 2


def test_repeated_documents_are_tokenized_once(agent_factory):
    agent, _ = agent_factory()
    document = filler_text(80)
    with mock.patch.object(rollout_module, "tokenize_documents", wraps=rollout_module.tokenize_documents) as spy:
        trajectories = agent.run(["Q?"] * 4 + ["R?"] * 2, [document] * 4 + [document + " More.", document])
    assert spy.call_count == 1 and spy.call_args.args[1] == [document, document + " More."]
    assert [t.num_chunks for t in trajectories[:4]] == [trajectories[5].num_chunks] * 4


def test_bad_inputs_raise_clear_errors(agent_factory):
    agent, _ = agent_factory(question_max_tokens=8)
    with pytest.raises(ValueError, match=r"questions\[1\] has \d+ tokens, more than question_max_tokens=8"):
        agent.run(["short?", "a question that is far too long for the configured budget of tokens"], ["x", "y"])
    with pytest.raises(TypeError, match=r"questions\[0\] must be a string"):
        agent.run([42], ["doc"])
    with pytest.raises(TypeError, match=r"documents\[1\] must be a string"):
        agent.run(["a", "b"], ["doc", 3.5])
    with pytest.raises(TypeError, match=r"documents\[0\] must be a string"):
        agent.run(["a"], [b"bytes"])
    with pytest.raises(ValueError, match="2 questions but 1 documents"):
        agent.run(["a", "b"], ["doc"])
    with pytest.raises(ValueError, match="chunk_tokens must be positive"):
        MemoryAgentConfig(chunk_tokens=0)
    with pytest.raises(ValueError, match="truncation"):
        MemoryAgentConfig(truncation="left")


def test_max_chunks_bounds_the_number_of_turns(agent_factory):
    agent, backend = agent_factory(max_chunks=2)
    (trajectory,) = agent.run(["Q?"], [filler_text(300)])
    assert trajectory.num_chunks == 2 and len(backend.calls) == 3
    agent, _ = agent_factory(max_chunks=2, truncation="error")
    with pytest.raises(ValueError, match="max_chunks"):
        agent.run(["Q?"], [filler_text(300)])


def test_trajectories_report_the_document_length_before_truncation(agent_factory, tiny_tokenizer):
    agent, _ = agent_factory(max_chunks=2)
    document = filler_text(300)
    (trajectory,) = agent.run(["Q?"], [document])
    assert trajectory.document_tokens == len(encode(tiny_tokenizer, document)) > 2 * C

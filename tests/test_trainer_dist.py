"""A real 2-process (torchrun, gloo) training step with unequal rows per process matches the single-process update."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_memagent.rollout import Conversation, Trajectory
from trl_memagent.trainer import MultiConvGRPOTrainer

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import dist_train  # noqa: E402


class ReplayTrainer(MultiConvGRPOTrainer):
    """The real trainer fed with the rollouts the 2-process run sampled (same generation batch, one process)."""

    replay: list[Trajectory] = []

    def _rollout(self, inputs, mode):
        assert [t.question for t in self.replay] == [x["prompt"] for x in inputs]
        return self.replay


def torchrun(script: str, *args: str, timeout: int = 240) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", script, *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


def test_two_processes_with_unequal_rows_match_single_process(tiny_model_dir, tmp_path):
    torchrun(str(HERE / "dist_train.py"), tiny_model_dir, str(tmp_path))
    recorded = json.loads((tmp_path / "rollouts.json").read_text())
    assert recorded["world_size"] == 2
    rows = recorded["rows_per_process"]
    assert rows[0] != rows[1], f"the processes should hold different numbers of conversations, got {rows}"
    update_2proc = torch.load(tmp_path / "update.pt")

    ReplayTrainer.replay = [
        Trajectory(r["question"], [Conversation(**c) for c in r["conversations"]], r["memories"], r["answer"])
        for r in recorded["rollouts"]
    ]
    trainer = ReplayTrainer(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        reward_funcs=dist_train.known_reward,
        args=dist_train.config(str(tmp_path / "single"), per_device=4),
        train_dataset=dist_train.dataset(),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    update_1proc = {n: p.detach() - before[n] for n, p in trainer.model.named_parameters()}
    assert update_1proc.keys() == update_2proc.keys()
    assert max(u.abs().max().item() for u in update_1proc.values()) > 1e-3
    diff = max((update_1proc[n] - update_2proc[n]).abs().max().item() for n in update_1proc)
    print(f"rows per process {rows}; max |update diff| 2-proc vs 1-proc = {diff:.2e}")
    assert diff < 1e-5

"""Real servers on loopback for the tests: `transformers serve` running a local model directory."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def transformers_serve(model_dir: str, startup_timeout: float = 120.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start `transformers serve` on a free loopback port; yields (base_url, process) and stops it after."""
    port = free_port()
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", model_dir]
    command += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"transformers serve exited early:\n{process.stderr.read()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"transformers serve did not answer on port {port} in {startup_timeout}s")
            time.sleep(0.5)
        yield base_url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from trl_memagent.tiny import build_tiny_model, build_tiny_tokenizer, save_tiny_model  # noqa: E402

# Tiny models gain nothing from intra-op threads, and two threads per process oversubscribe a 2-core
# machine as soon as a test starts a server or a second training process.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    return build_tiny_model(tiny_tokenizer).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_model(str(tmp_path_factory.mktemp("tiny-model")))

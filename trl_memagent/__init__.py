"""MemAgent for the Hugging Face TRL ecosystem."""

from .backends import BackendError, Generation, GenerationBackend, OpenAIBackend, TransformersBackend
from .rollout import Conversation, MemoryAgent, MemoryAgentConfig, Trajectory

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "Conversation",
    "Generation",
    "GenerationBackend",
    "MemoryAgent",
    "MemoryAgentConfig",
    "OpenAIBackend",
    "TransformersBackend",
    "Trajectory",
]

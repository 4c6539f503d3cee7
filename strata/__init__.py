"""strata: long-term memory for LLM agents, as a LangGraph graph over Chroma."""

from memory.errors import ConfigError, InputError, NotFoundError, StrataError
from strata.api import Answer, IngestReport, Memory

__all__ = ["Answer", "ConfigError", "IngestReport", "InputError", "Memory", "NotFoundError", "StrataError"]

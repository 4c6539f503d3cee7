"""strata: long-term memory for LLM agents, as a LangGraph graph over Chroma.

Everything installs under this one name: `strata.graph`, `strata.agents`,
`strata.memory`, `strata.prompts` and `strata.evaluation`, so nothing collides
with an app's own `agents/` or `memory/` folder or another distribution's
top-level `agents`. The wheel places those folders inside this package; in a
source checkout they sit beside it at the repository's top level (the layout a
reader expects), and the lines below let the same names import there too.
"""

from pathlib import Path as _Path

_CHECKOUT = _Path(__file__).resolve().parent.parent
if not (_Path(__file__).parent / "graph").is_dir() and (_CHECKOUT / "graph" / "graph.py").is_file() \
        and (_CHECKOUT / "pyproject.toml").is_file():
    __path__.append(str(_CHECKOUT))  # source checkout: strata.graph is <repo>/graph

from strata.api import Answer, IngestReport, Memory  # noqa: E402
from strata.memory.errors import ConfigError, InputError, NotFoundError, StrataError  # noqa: E402

__all__ = ["Answer", "ConfigError", "IngestReport", "InputError", "Memory", "NotFoundError", "StrataError"]

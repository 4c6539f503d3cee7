"""The README's Python example runs as written, in a fresh process and a folder of its own.

It is the first code a new user copies: its relative `data_dir` (".strata", the default) and
each call on it must work, and its answer must be the one the README implies.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_example() -> str:
    """The first Python block under "Use it from Python"."""
    section = README.read_text(encoding="utf-8").split("## Use it from Python", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "README's 'Use it from Python' has no Python block"
    return found.group(1)


def test_the_readme_python_example_runs_as_written(tmp_path: Path, offline_env: dict[str, str]) -> None:
    code = python_example()
    assert 'data_dir=".strata"' in code and "erase(" in code and "import_from(" in code
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=offline_env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Denver" in done.stdout  # `print(answer.answer, ...)`: where Alice said she lives
    assert (tmp_path / ".strata").is_dir() and (tmp_path / "elsewhere").is_dir()

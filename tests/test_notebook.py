"""The quickstart notebook runs top to bottom, offline, in a real Jupyter kernel.

The kernel is the venv's own `python3` kernelspec (ipykernel installs it under
`<venv>/share/jupyter/kernels`); if it is missing it is installed there first,
so the notebook never runs in some other Python. The run must stay quick: it
takes about 12 seconds on two cores; the bound below only catches a notebook
that started ingesting far more than a few sessions.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "quickstart.ipynb"
KERNEL = "python3"


def ensure_venv_kernel() -> None:
    """The `python3` kernelspec in this interpreter's prefix (the venv), installed if absent."""
    try:
        KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        from ipykernel.kernelspec import install

        install(kernel_name=KERNEL, prefix=sys.prefix)


def outputs(notebook: Any) -> list[str]:
    """The printed text and results of each code cell, in order."""
    texts: list[str] = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        parts = [o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.get("name") == "stdout"]
        parts += [o.data.get("text/plain", "") for o in cell.outputs if o.output_type == "execute_result"]
        texts.append("".join(parts))
    return texts


def test_quickstart_runs_offline_top_to_bottom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_venv_kernel()
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebook's memory folder lands in the test's folder
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    started = time.perf_counter()
    NotebookClient(
        notebook, timeout=120, kernel_name=KERNEL, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    elapsed = time.perf_counter() - started
    assert elapsed < 180, f"the quickstart took {elapsed:.0f} s: keep it to a few sessions"

    cells = outputs(notebook)
    text = "\n".join(cells)
    assert "memory folder: " + str(tmp_path) in text
    assert "stored 18 turns" in text or "stored 11 turns" in text  # LoCoMo conv-26, else the shipped sample
    assert "cites ['D" in text and "evidence: [D" in text
    rounds = int(text.split("research rounds: ", 1)[1].split()[0])
    assert rounds >= 2  # the Judge asked for at least one Retry
    assert "Refresher: update fact:" in text and "status:  active -> superseded" in text
    kept = text.split("text:    ", 1)[1].splitlines()[0]  # the superseded fact keeps its words
    assert text.split(" is active again: ", 1)[1].splitlines()[0] == kept  # the undo made the older fact current

"""Fixtures every test file may use: a fresh data folder, an offline environment,
the real LoCoMo files, one embedder per session, and closed stores after each test.

Tests run offline: no chat model is configured (the offline policies answer) and
the embedder is loaded from the weights a package ships, never from the network.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
# CI clones the repo with `shared/` beside it, so the data is found relative to the repo.
LOCOMO_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
T = TypeVar("T")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "ANONYMIZED_TELEMETRY": "False", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


@pytest.fixture(autouse=True)
def offline_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No chat model, no network; returns the environment to hand to a subprocess."""
    monkeypatch.delenv("STRATA_MODEL", raising=False)
    monkeypatch.delenv("STRATA_BASE_URL", raising=False)
    for name, value in OFFLINE_ENV.items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)


@contextmanager
def offline_environment() -> Iterator[pytest.MonkeyPatch]:
    """The environment `offline_env` gives a test, for a fixture wider than one test (module-scoped ingests)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("STRATA_MODEL", raising=False)
        patch.delenv("STRATA_BASE_URL", raising=False)
        for name, value in OFFLINE_ENV.items():
            patch.setenv(name, value)
        yield patch


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A memory folder no other test shares (created on first write)."""
    return tmp_path / "mem"


@pytest.fixture(scope="session")
def locomo_dir() -> Path:
    """The LoCoMo development files, or a skip saying where they were looked for."""
    if not (LOCOMO_DIR / "conv-26.json").is_file():
        pytest.skip(f"LoCoMo data not found at {LOCOMO_DIR}: clone the repo with shared/ beside it")
    return LOCOMO_DIR


@pytest.fixture(scope="session")
def embedder() -> Any:
    """The local embedder, loaded once for the whole session (it takes seconds)."""
    for name, value in OFFLINE_ENV.items():
        os.environ.setdefault(name, value)
    from strata.memory.embeddings import get_embedder

    loaded = get_embedder()
    loaded.embed(["warm up"])
    return loaded


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A PostgreSQL server of the test file's own (tests/servers.py), for its slow tests."""
    from servers import postgres_run

    with postgres_run(tmp_path_factory.mktemp("postgres") / "postgres.log") as server:
        yield server


@pytest.fixture(params=["postgres", "folder"])
def ledger_url(request: pytest.FixtureRequest) -> str:
    """For the tests of processes sharing a memory on a Chroma server: a fresh PostgreSQL database, or "" for
    the data folder's SQLite ledger (where the folder's file locks keep them apart). A file may define its own."""
    if request.param == "folder":
        return ""
    import uuid

    server = request.getfixturevalue("postgres")
    return str(server.create_database(f"t_{uuid.uuid4().hex[:12]}"))


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """`chroma run` of the test file's own (tests/servers.py), for its slow tests."""
    from servers import chroma_run

    base = tmp_path_factory.mktemp("chroma-server")
    with chroma_run(base / "data", base / "chroma.log") as server:
        yield server


def all_at_once(open_one: Callable[[], T], times: int) -> list[T]:
    """Call `open_one` from `times` threads started together; their results, or the first error raised."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(open_one())
        except BaseException as error:  # re-raised below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture(autouse=True)
def _close_stores() -> Iterator[None]:
    """Close every ledger and Chroma client a test opened, so the next test starts clean."""
    yield
    from strata.memory.registry import close_all

    close_all()


def files_holding_vector(folder: Path, vector: np.ndarray) -> list[str]:
    """Every file under `folder` that holds `vector` as float32 (to within the rounding of Chroma's index,
    which stores it normalised again), at any byte alignment."""
    found = []
    for path in (p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for shift in range(4):
            floats = np.frombuffer(data[shift : shift + (len(data) - shift) // 4 * 4], dtype=np.float32)
            if len(floats) < len(vector):
                continue
            with np.errstate(invalid="ignore"):
                starts = np.flatnonzero(np.abs(floats[: len(floats) - len(vector) + 1] - vector[0]) < 1e-6)
                if any(np.max(np.abs(floats[i : i + len(vector)] - vector)) < 1e-6 for i in starts):
                    found.append(str(path.relative_to(folder)))
                    break
    return sorted(found)


def index_folders(data_dir: Path) -> dict[str, str]:
    """Each Chroma collection's name and the folder of its vector index (named by its segment id), from the
    folder's own database."""
    from contextlib import closing

    from strata.memory.reindex import open_chroma_db

    conn = open_chroma_db(data_dir / "chroma")
    assert conn is not None
    with closing(conn):
        return dict(conn.execute("SELECT c.name, s.id FROM segments s JOIN collections c ON s.collection = c.id "
                                 "WHERE s.scope = 'VECTOR'").fetchall())

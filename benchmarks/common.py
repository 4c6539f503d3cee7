"""What the scale and freshness benchmarks share: the offline environment, the LoCoMo files,
figures (RSS, percentiles) and the throwaway servers, so each script holds only its measurement.

Import it first (`from common import ...` from a script in this folder): it sets the offline
environment before the embedder and Chroma are imported.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                      ("ANONYMIZED_TELEMETRY", "False"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1")):
    os.environ.setdefault(_name, _value)

from strata.memory.settings import StoreSettings  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LOCOMO = REPO.parent / "shared" / "data" / "locomo"


def locomo_files(script: str) -> list[Path]:
    """The LoCoMo development conversations, or a one-line exit saying where they were looked for."""
    files = sorted(LOCOMO.glob("conv-*.json"))
    if not files:
        raise SystemExit(f"{script}: error: no LoCoMo files in {LOCOMO}: clone the repo with shared/ beside it")
    return files


def rss_mb() -> float:
    """Resident memory of this process now (not the peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50 and p95 in milliseconds."""
    ms = np.asarray(seconds) * 1000.0
    return {"p50": round(float(np.percentile(ms, 50)), 1), "p95": round(float(np.percentile(ms, 95)), 1)}


def timed(action: Callable[[], object], repeat: int) -> list[float]:
    """Seconds of each of `repeat` calls."""
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return seconds


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.3f} ms (p50 of {len(values)})"


def machine() -> str:
    return f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}"


@contextmanager
def servers(folder: Path, database: str) -> Iterator[StoreSettings]:
    """A throwaway PostgreSQL and `chroma run`, started as the tests start them (tests/servers.py),
    and the settings of a replica using both, with its local folder in `folder`."""
    sys.path.insert(0, str(REPO / "tests"))
    from servers import LOOPBACK, chroma_run, postgres_run

    with ExitStack() as stack:
        postgres = stack.enter_context(postgres_run(folder / "postgres.log"))
        chroma = stack.enter_context(chroma_run(folder / "chroma", folder / "chroma.log"))
        yield StoreSettings(data_dir=str(folder / "local"), chroma_host=LOOPBACK, chroma_port=chroma.port,
                            ledger_url=postgres.create_database(database))

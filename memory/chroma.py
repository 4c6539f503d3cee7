"""Opening Chroma, embedded or as a server, and naming its collections.

Each namespace gets its own four collections (raw, fact, episode, persona), so
one user's memory can never leak into another's search, and a namespace can be
dropped whole.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from strata.memory.errors import ConfigError
from strata.memory.locks import hold_folder, release_folder
from strata.memory.records import Kind
from strata.memory.settings import StoreSettings, folder_is_read_only

_CLIENTS: dict[StoreSettings, Any] = {}
_LOCK = threading.Lock()


def collection_name(namespace: str, kind: Kind) -> str:
    """A valid Chroma name that is unique per namespace and readable."""
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", namespace).strip("-")[:40] or "ns"
    digest = hashlib.sha1(namespace.encode("utf-8")).hexdigest()[:8]
    return f"strata-{slug}-{digest}-{kind}"


def open_client(settings: StoreSettings) -> Any:
    """The shared Chroma client for these settings (one per process)."""
    with _LOCK:
        client = _CLIENTS.get(settings)
        if client is None:
            client = _connect(settings)
            _CLIENTS[settings] = client
        return client


def forget_client(settings: StoreSettings) -> None:
    """Drop the cached client (after `close`, or in tests that restart a server); an embedded
    folder is handed back to other processes once its last client here is gone."""
    with _LOCK:
        client = _CLIENTS.pop(settings, None)
        if client is not None and not settings.chroma_host:
            release_folder(settings.chroma_path)


def _connect(settings: StoreSettings) -> Any:
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    chroma_settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
    if settings.chroma_host:
        try:
            client = chromadb.HttpClient(
                host=settings.chroma_host,
                port=settings.chroma_port,
                ssl=settings.chroma_ssl,
                headers=settings.headers(),
                settings=chroma_settings,
            )
            client.heartbeat()
        except Exception as exc:
            raise ConfigError(
                f"cannot reach the Chroma server at {settings.chroma_host}:{settings.chroma_port} "
                f"({type(exc).__name__}): start it with `chroma run --port {settings.chroma_port}` "
                "or fix chroma_host / chroma_port (STRATA_CHROMA_HOST, STRATA_CHROMA_PORT)"
            ) from exc
        return client
    path = settings.chroma_path
    hold_folder(path)  # one process at a time: another one's index of the folder would go stale
    if folder_is_read_only(path.parent):
        path = _private_copy(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(path=str(path), settings=chroma_settings)
    except Exception as exc:
        release_folder(path)
        raise ConfigError(
            f"cannot open the memory folder {path} ({type(exc).__name__}: {str(exc)[:100]}): "
            "check data_dir (STRATA_DATA_DIR) points to a writable folder"
        ) from exc


def _private_copy(path: Path) -> Path:
    """A read-only memory folder is read from a private copy of its Chroma folder: Chroma's embedded
    engine writes to its files even to read them. The copy is removed when the process ends; writes
    never reach it, since the ledger refuses them first (`Ledger.check_writable`)."""
    if not path.is_dir():
        raise ConfigError(
            f"the memory folder {path.parent} is read-only and holds no memory yet: point data_dir at a "
            "folder you can write, or at a copy of a memory"
        )
    copy = Path(tempfile.mkdtemp(prefix="strata-read-only-")) / "chroma"
    atexit.register(shutil.rmtree, copy.parent, True)
    shutil.copytree(path, copy, copy_function=shutil.copyfile)
    for folder, _, files in os.walk(copy):  # the copy is ours to write, whatever the original's modes
        os.chmod(folder, 0o700)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o600)
    return copy


def get_collection(client: Any, namespace: str, kind: Kind) -> Any:
    """Create on first use; cosine space, vectors supplied by our embedder."""
    return client.get_or_create_collection(
        name=collection_name(namespace, kind),
        embedding_function=None,
        configuration={"hnsw": {"space": "cosine"}},
        metadata={"namespace": namespace, "kind": kind},
    )

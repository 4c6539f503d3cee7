"""Opening Chroma, embedded or as a server, and naming its collections.

Each namespace gets its own collections (raw, fact, episode, persona, summary),
so one user's memory can never leak into another's search, and a namespace can
be dropped whole.

The embedded engine keeps the vector index of every collection it wrote or
searched in memory, about 2.7 MB even for a few records, in a cache sized from
the process's open-file limit (a fifth of it: 4,000 indexes at 20,000 files). A
process serving many small namespaces grew by 5.2 MB per idle one. Embedded
clients are therefore opened with the cache bounded to the indexes of the
namespaces the process keeps open (`VECTOR_INDEXES_PER_STORE` x
STRATA_MAX_OPEN_STORES; Chroma has no setting for it and sizes it from the
open-file limit, so the client is shown a limit that makes that room while it
starts; the process's own limit is untouched). The engine can evict only an
index it has written to disk at least once (an evicted index that was never
written fails with "Nothing found on disk"; a written one is read back, with
the writes since replayed from the engine's log), so a small collection writes
its index at every write (`sync_threshold` 1), and one searched by Chroma (past
`EXACT_LIMIT` records, memory/vector_index.py) goes back to Chroma's default,
which keeps its writes fast (21 against 58 ms an upsert at 100,000 records).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from strata.memory.errors import ConfigError, DiskFullError, disk_full, disk_full_message
from strata.memory.locks import hold_folder, release_folder
from strata.memory.private_files import keeps_private, make_private_file, make_private_folder, make_private_tree
from strata.memory.records import KINDS, Kind
from strata.memory.reindex import recover
from strata.memory.settings import StoreSettings, env_number, folder_is_read_only, max_open_stores
from strata.memory.vector_index import EXACT_LIMIT

VECTOR_INDEXES_PER_STORE = len(KINDS)
FILES_PER_INDEX = 5
"""Chroma sizes its index cache as the open-file limit divided by this (4 data files and 1 metadata file
an index)."""
SMALL_SYNC = {"sync_threshold": 1, "batch_size": 1}
"""HNSW settings of a small embedded collection: its index is written to disk at every write."""
SERVER_TIMEOUT = 120.0
"""Seconds a Chroma server may take over one request: the largest write (5,461 records) takes a few."""
CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection to a Chroma server."""
DEFAULT_SYNC = 1000
"""Chroma's own `sync_threshold`, restored once a collection is searched by Chroma."""
MARK = "ledger"
"""The metadata key of a server collection that names the ledger writing it (by the random mark that ledger
gave the namespace): processes sharing a server but not a ledger each handed out the same turn ids and
overwrote each other's records (memory/store.py: `_check_mark`)."""

_CLIENTS: dict[StoreSettings, Any] = {}
_LOCK = threading.Lock()
# An embedded folder whose default ACL does not make Chroma's new files private (`keeps_private`) -> the index
# folders in it when it was opened or last looked at (`make_new_indexes_private`)
_SEEN_INDEXES: dict[str, set[str]] = {}
_SEEN_LOCK = threading.Lock()
INHERITED: list[object] = []  # what a forked child took over from its parent and must never close


def collection_name(namespace: str, kind: Kind) -> str:
    """A valid Chroma name, readable and unique per namespace: the slug keeps the name's ASCII letters and
    digits, so names differing in other characters share it, and 128 bits of SHA-256 tell them apart."""
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]
    return f"strata-{_slug(namespace)}-{digest}-{kind}"


def legacy_collection_name(namespace: str, kind: Kind) -> str:
    """The name earlier versions gave: 32 bits of SHA-1, which two namespaces could share by chance or by
    design (ids that differ only in punctuation or non-Latin letters share a slug). Such a collection is
    renamed to `collection_name` when its own namespace opens it, and used by no other."""
    digest = hashlib.sha1(namespace.encode("utf-8")).hexdigest()[:8]
    return f"strata-{_slug(namespace)}-{digest}-{kind}"


def collection_names(namespace: str) -> list[str]:
    """Every name the namespace's collections may have on disk (what an erase or a drop clears)."""
    return [name for kind in KINDS
            for name in (collection_name(namespace, kind), legacy_collection_name(namespace, kind))]


def _slug(namespace: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", namespace).strip("-")[:40] or "ns"


def _existing(client: Any, name: str) -> Any | None:
    """The collection of that name, None when Chroma has none (creating nothing)."""
    from chromadb.errors import NotFoundError  # (Chroma loads when a client opens, not with this module)

    try:
        return client.get_collection(name)
    except (NotFoundError, ValueError):  # ValueError: older versions; a server that does not answer is an error
        return None


def find_collection(client: Any, namespace: str, kind: Kind) -> Any | None:
    """The namespace's collection of that kind if Chroma has it (under its current or its earlier name),
    creating nothing."""
    for name in (collection_name(namespace, kind), legacy_collection_name(namespace, kind)):
        collection = _existing(client, name)
        if collection is not None and owner_of(collection) in (namespace, None):
            return collection
    return None


def owner_of(collection: Any) -> str | None:
    """The namespace a collection was created for (its metadata), None when it does not say."""
    owner = (collection.metadata or {}).get("namespace")
    return owner if isinstance(owner, str) else None


def mark_of(collection: Any) -> str | None:
    """The mark of the ledger a server collection is written through (its metadata, `MARK`), None when
    it has none (created embedded, or by an earlier version)."""
    mark = (collection.metadata or {}).get(MARK)
    return mark if isinstance(mark, str) else None


def set_mark(collection: Any, namespace: str, kind: Kind, mark: str) -> None:
    """Write a ledger's mark into a collection's metadata. Chroma replaces metadata whole, so the
    collection's other keys go with it (its owner and kind; never an `hnsw:` key, which Chroma refuses)."""
    kept = {key: value for key, value in (collection.metadata or {}).items() if not key.startswith("hnsw:")}
    collection.modify(metadata={**kept, "namespace": namespace, "kind": kind, MARK: mark})


def _adopt_legacy(client: Any, namespace: str, kind: Kind, name: str, embedded: bool) -> None:
    """Rename the namespace's collection from its earlier name, once: only when its metadata names this
    namespace (another namespace whose name shared the digest keeps its own) and no collection has the
    current name yet."""
    if _existing(client, name) is not None:
        return
    legacy = legacy_collection_name(namespace, kind)
    if embedded:
        recover(client, legacy)  # a rebuild of it that stopped halfway (memory/reindex.py)
    old = _existing(client, legacy)
    if old is not None and owner_of(old) in (namespace, None):
        old.modify(name=name)


def open_client(settings: StoreSettings) -> Any:
    """The shared Chroma client for these settings (one per process)."""
    with _LOCK:
        client = _CLIENTS.get(settings)
        if client is None:
            client = _connect(settings)
            _CLIENTS[settings] = client
        return client


def open_clients() -> list[StoreSettings]:
    """The settings of every client this process holds (an embedded folder is busy while one is open)."""
    with _LOCK:
        return list(_CLIENTS)


def forget_client(settings: StoreSettings) -> None:
    """Drop the cached client (after `close`, or in tests that restart a server); an embedded
    folder is handed back to other processes once its last client here is gone."""
    with _LOCK:
        client = _CLIENTS.pop(settings, None)
        if client is not None and not settings.chroma_host:
            # Chroma keeps one system per folder for the whole process, with its files and indexes open;
            # reopened after another process wrote the folder, a kept one served stale indexes ("Error
            # finding id" on every later read and write). Closing it stops the system.
            try:
                client.close()
            finally:
                release_folder(settings.chroma_path)


def _connect(settings: StoreSettings) -> Any:
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    chroma_settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
    if settings.chroma_host:
        try:
            _answers_at_all(settings)  # Chroma's client waits on a silent server for ever
            client = chromadb.HttpClient(
                host=settings.chroma_host,
                port=settings.chroma_port,
                ssl=settings.chroma_ssl,
                headers=settings.headers(),
                settings=chroma_settings,
            )
            _bounded(client)
            client.heartbeat()
        except Exception as exc:
            said = " ".join(str(exc).split())[:100]
            where = f"the Chroma server at {settings.chroma_host}:{settings.chroma_port}"
            if _refused(exc):
                raise ConfigError(f"{where} refused this client ({said}): set chroma_auth_header "
                                  "(STRATA_CHROMA_AUTH_HEADER) to the header it expects, 'Name: value'") from exc
            raise ConfigError(
                f"cannot reach {where} ({type(exc).__name__}{': ' + said if said else ''}): start it with "
                f"`chroma run --port {settings.chroma_port}` or fix chroma_host / chroma_port "
                "(STRATA_CHROMA_HOST, STRATA_CHROMA_PORT)"
            ) from exc
        return client
    path = settings.chroma_path
    hold_folder(path)  # one process at a time: another one's index of the folder would go stale
    if folder_is_read_only(path.parent):
        path = _private_copy(path)
    try:
        bound = VECTOR_INDEXES_PER_STORE * max_open_stores()
    except ConfigError:  # a wrong STRATA_MAX_OPEN_STORES says so itself
        release_folder(path)
        raise
    try:
        make_private_folder(path)
        make_private_file(path / "chroma.sqlite3")  # a new folder's database (Chroma takes an empty file)
        with _index_cache_bound(bound):
            client = chromadb.PersistentClient(path=str(path), settings=chroma_settings)
        if not keeps_private(path):
            with _SEEN_LOCK:  # (the caller holds `_LOCK`)
                _SEEN_INDEXES[str(path)] = _index_folders(path)
        return client
    except Exception as exc:
        release_folder(path)
        if disk_full(exc, path):
            raise DiskFullError(disk_full_message(path.parent)) from exc
        raise ConfigError(
            f"cannot open the memory folder {path} ({type(exc).__name__}: {str(exc)[:100]}): "
            "check data_dir (STRATA_DATA_DIR) points to a writable folder"
        ) from exc


def _index_folders(path: Path) -> set[str]:
    """The names of the folders in an embedded Chroma folder (its indexes'; read without a stat each)."""
    try:
        return {entry.name for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False)}
    except OSError:
        return set()


def make_new_indexes_private(path: Path) -> None:
    """Make the index folders Chroma wrote in an embedded folder since it was opened (or last looked at) this
    user's only, where the folder's default ACL does not (macOS, a file system without ACLs: Chroma makes them
    as the umask says, 0755 and 0644 under 022). Those there at the open keep their modes. A store calls it
    after its first write of each kind: Chroma writes a new collection's index at its first write."""
    with _SEEN_LOCK:
        seen = _SEEN_INDEXES.get(str(path))
        if seen is None:
            return
        # one whose files are not written yet is looked at again next time
        new = {name for name in _index_folders(path) - seen if (path / name / "header.bin").exists()}
        seen |= new
    for name in new:
        make_private_tree(path / name)


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


@contextmanager
def _index_cache_bound(indexes: int) -> Iterator[None]:
    """Open an embedded client with room for `indexes` vector indexes in its cache. Chroma sizes the cache
    from the open-file limit it reads while the client starts; for that read only, it is shown the limit
    that makes room for `indexes` (the process's real limit is not touched)."""
    try:
        import chromadb.api.rust as engine
    except ImportError:  # pragma: no cover - another Chroma layout: its own cache size
        yield
        return
    real = engine.resource

    class _Limits:
        RLIMIT_NOFILE = real.RLIMIT_NOFILE

        @staticmethod
        def getrlimit(which: int) -> tuple[int, int]:
            soft, hard = real.getrlimit(which)
            return (min(soft, indexes * FILES_PER_INDEX), hard) if which == real.RLIMIT_NOFILE else (soft, hard)

    engine.resource = _Limits  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.resource = real


def _refused(error: BaseException) -> bool:
    """Whether the server answered that this client may not in (HTTP 401 or 403), by status, not by text."""
    import httpx

    if isinstance(error, httpx.HTTPStatusError):
        return error.response.status_code in (401, 403)
    return type(error).__name__ in ("AuthorizationError", "AuthenticationError")  # Chroma's own, past the heartbeat


def server_timeout() -> float:
    """How long a Chroma server may take to answer one request (STRATA_CHROMA_TIMEOUT, seconds): past it the
    call fails in one line (`server_stopped`) instead of holding the namespace's lock for ever."""
    return env_number("chroma_timeout", SERVER_TIMEOUT, 1, unit="seconds")


def _answers_at_all(settings: StoreSettings) -> None:
    """Raise when the server does not answer its heartbeat within the timeout (a frozen process, a port that
    accepts and never replies): Chroma's client would wait for ever in its constructor."""
    import httpx
    from chromadb.api.base_http_client import BaseHTTPClient
    from chromadb.config import Settings as ChromaSettings

    api = BaseHTTPClient.resolve_url(  # as Chroma's own client resolves it (a host may be a whole URL)
        chroma_server_host=settings.chroma_host or "", chroma_server_ssl_enabled=settings.chroma_ssl,
        default_api_path=ChromaSettings().chroma_server_api_default_path, chroma_server_http_port=settings.chroma_port)
    httpx.get(f"{api}/heartbeat", headers=settings.headers(), timeout=server_timeout()).raise_for_status()


def _bounded(client: Any) -> None:
    """Give the client's HTTP session a timeout (Chroma builds it with none); left as it is if this version
    of Chroma keeps its session elsewhere."""
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):
        wait = server_timeout()
        session.timeout = httpx.Timeout(wait, connect=min(wait, CONNECT_TIMEOUT))


def get_collection(
    client: Any, namespace: str, kind: Kind, embedded: bool, create: bool = True, mark: str | None = None
) -> Any:
    """The namespace's collection of `kind`, created on first use when `create` (a write), else None when
    there is none (a read: a question on a made-up namespace must not make it one). Cosine space, vectors
    supplied by our embedder. An `embedded` collection (not on a Chroma server) of at most EXACT_LIMIT
    records writes its index at every write (see the module's docstring), also one an earlier version
    created with Chroma's default. One created on a server takes the ledger's `mark` (`MARK`); an existing
    one keeps the mark it has, which the caller compares."""
    name = collection_name(namespace, kind)
    if embedded:
        recover(client, name)  # a rebuild that stopped halfway (memory/reindex.py), before it is created anew
    _adopt_legacy(client, namespace, kind, name, embedded)
    if create:
        collection = client.get_or_create_collection(
            name=name,
            embedding_function=None,
            configuration={"hnsw": {"space": "cosine", **(SMALL_SYNC if embedded else {})}},
            metadata={"namespace": namespace, "kind": kind, **({MARK: mark} if mark and not embedded else {})},
        )
    elif (collection := _existing(client, name)) is None:
        return None
    if owner_of(collection) not in (namespace, None):  # never another namespace's records, whatever the name
        raise ConfigError(f"the Chroma collection {name} holds the namespace {owner_of(collection)!r}, not "
                          f"{namespace!r}: it was renamed or written by hand; rename it back or drop it")
    if embedded and _sync_threshold(collection) > 1 and collection.count() <= EXACT_LIMIT:
        collection.modify(configuration={"hnsw": {"sync_threshold": 1}})
    return collection


def grown_large(collection: Any) -> None:
    """A collection now searched by Chroma (past EXACT_LIMIT records) writes its index as Chroma does by
    default; it was written to disk while small, so the cache may still evict it."""
    if _sync_threshold(collection) < DEFAULT_SYNC:
        collection.modify(configuration={"hnsw": {"sync_threshold": DEFAULT_SYNC}})


def _sync_threshold(collection: Any) -> int:
    config = getattr(collection, "configuration_json", None) or {}
    return int((config.get("hnsw") or {}).get("sync_threshold", DEFAULT_SYNC))


def forget_after_fork() -> None:
    """In a forked child: the parent's Chroma clients and systems have no threads here, and a first read
    hung. They are dropped, not closed (the parent still uses the same files), and kept referenced so
    that no finaliser runs in the child."""
    global _LOCK
    from chromadb.api.shared_system_client import SharedSystemClient

    _LOCK = threading.Lock()
    INHERITED.append((dict(_CLIENTS), dict(SharedSystemClient._identifier_to_system)))
    _CLIENTS.clear()
    SharedSystemClient.clear_system_cache()


def server_stopped(error: BaseException) -> bool:
    """Whether `error` is a Chroma server that stopped answering mid-call (connection refused or reset, a
    timeout): what a caller can act on, unlike a bug."""
    import httpx

    return isinstance(error, httpx.TransportError)


def server_stopped_message(error: BaseException) -> str:
    return (f"the Chroma server stopped answering ({type(error).__name__}): start it again and repeat the call; "
            "what the call wrote is kept, and what it left half done is finished or taken back by the next one")

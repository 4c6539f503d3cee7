"""A LangGraph `BaseStore` backed by this memory, for apps that already use `store=`.

An app that compiles its own graph with `builder.compile(store=StrataStore(...))`
gets durable items and semantic search behind `store.search`, over the same
Chroma collections the memory graph writes. A query's score is the cosine
similarity of the query's vector and the item's stored vector, as LangGraph's
own stores return it, so scores from different namespaces and kinds compare
(`score > 0.5` means the same everywhere) and results are ordered by it.

Mapping:
- a namespace tuple is one memory namespace, its labels joined with "/"
  (`("users", "ann")` is the namespace `users/ann`, what `Memory("users/ann")` opens);
  a character a memory namespace does not allow (anything but letters, digits and
  `_ - @ +`; LangGraph itself refuses "." and NUL) is written `.<hex code>.`, so
  `("memories", "auth0|abc")` is `memories/auth0.7c.abc`: reversible, and a label
  of allowed characters is its own name (composed, NFC, as every memory
  namespace is: memory/namespaces.py);
- an item is a raw-like record `raw:item:<key>` whose text is the value's text
  fields (what gets embedded and matched); the full value, its versions and its
  timestamps live in the ledger's `store_items` table (memory/store_items.py):
  the SQLite file, or the PostgreSQL database replicas share (`ledger_url`);
- `delete` tombstones the record through `MemoryStore.delete`, so it is in
  the history and `Memory.undo` brings it back; `get` returns None meanwhile;
- overwriting a key goes through `MemoryStore.update` (old text in history); the
  newest version of each text a key had is kept (an undo brings that value back),
  older versions with the same text go, and reads fetch only the version they need;
- with `include_memory=True` (the default) the records the memory graph
  wrote (turns, facts, episodes, persona traits) are items too, keyed by their
  record id, so `store.search(("ann",), query=...)` also finds what a
  conversation ingested into `Memory("ann")` holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)
from langgraph.store.base.embed import get_text_at_path, tokenize_path
from pydantic import ValidationError

from strata.memory import store_items
from strata.memory.catalog import chroma_namespaces
from strata.memory.errors import InputError, check_text, first_unstorable, shown_value
from strata.memory.failures import in_one_line
from strata.memory.ledger import Ledger
from strata.memory.namespaces import MAX_LENGTH, check_namespace, mark_after
from strata.memory.records import KINDS, Kind, Record, Status
from strata.memory.registry import ledger_for, open_store, stored_name
from strata.memory.run_gate import run_gate
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore, kind_of
from strata.memory.store_items import ITEM_PREFIX, ItemVersion

SEPARATOR = "/"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")
_PLAIN_MARKS = frozenset("_-@+")  # kept as they are in a label, with letters and digits (memory/namespaces.py)
_ESCAPED = re.compile(r"\.([0-9a-f]{1,6})\.")

@dataclass(frozen=True)
class _Candidate:
    """A live item of one namespace, with the record that carries its text."""

    item: Item
    record_id: str
    ranked: bool  # False for items put with index=False: found by filters, never by a query


@dataclass(frozen=True)
class _Put:
    """One put of a batch, checked and turned into what is stored before anything is written."""

    name: str
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any] | None  # None deletes
    text: str
    indexed: bool


def _settings_as_memory_reads_them(given: dict[str, Any]) -> StoreSettings:
    """The store settings from keywords, each one not given from its `STRATA_*` variable as `Memory` reads it
    (the runtime context): a replica configured by its environment shares its ledger and Chroma, never a
    local `.strata` it would otherwise fall back to."""
    from strata.graph.context import Context  # (the context builds on the memory layer, not the reverse)

    StoreSettings(**given)  # a misspelt or wrong setting is said as a store setting
    texts = {name: ("" if value is None else value) for name, value in given.items()}  # Context's "unset"
    # a given value is kept, as in Memory; the namespace counts as given: a store's settings name no memory
    # (STRATA_REQUIRE_NAMESPACE is about runs)
    return Context(**texts, _given=frozenset(texts) | {"namespace"}).store_settings()


class StrataStore(BaseStore):
    """LangGraph's store interface over one data folder (or Chroma server) of this memory."""

    supports_ttl = False

    def __init__(
        self,
        settings: StoreSettings | None = None,
        *,
        include_memory: bool = True,
        index_fields: Sequence[str] | None = None,
        **settings_fields: Any,
    ) -> None:
        """`settings` or the same fields as keywords (data_dir, chroma_host, embedder ...).

        `index_fields` are the value paths embedded by default (LangGraph's `index.fields`);
        None embeds every string in the value.
        """
        if settings is not None and settings_fields:
            raise InputError("give either settings or keyword settings such as data_dir=..., not both")
        try:
            self.settings = settings or _settings_as_memory_reads_them(settings_fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "settings"
            known = ", ".join(StoreSettings.model_fields)
            message = str(first.get("msg", "")).removeprefix("Value error, ")
            raise InputError(f"store setting {where}: {message} (the settings are {known})") from None
        self.include_memory = include_memory
        self.index_fields = list(index_fields) if index_fields is not None else None
        self._lock = threading.RLock()
        self._ledger()  # opened (and migrated) now: a wrong ledger_url is one line here, not at the first put

    @classmethod
    def from_memory(cls, memory: Any, **options: Any) -> StrataStore:
        """The store over the same data folder (or server) as a `strata.Memory`."""
        return cls(memory.context("ask").store_settings(), **options)

    def close(self) -> None:
        """Nothing to let go of: the ledger and the namespaces belong to the process's registry
        (memory/registry.py), shared with every `Memory` of the same settings."""

    def _ledger(self) -> Ledger:
        return ledger_for(self.settings)

    # the two entry points LangGraph calls ---------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Reads first, then writes (the last put of a key wins), as LangGraph's own stores do. A Chroma server
        that stops answering, or a full disk, is one line (memory/failures.py), not the library's error."""
        try:
            return self._batch(ops)
        except Exception as error:
            said = in_one_line(error, self.settings)
            if said is None:
                raise
            raise said from error

    def _batch(self, ops: Iterable[Op]) -> list[Result]:
        if not isinstance(ops, Iterable) or isinstance(ops, str | bytes):
            raise InputError(f"batch takes a list of store operations (GetOp, PutOp, ...), not {type(ops).__name__}")
        ops = list(ops)
        for op in ops:
            _check_op(op)
            validate_op_namespace(op)
        # every put is checked and prepared before anything is written: a batch that raises wrote nothing
        puts: dict[tuple[str, str], _Put] = {}
        for op in ops:
            if isinstance(op, PutOp):
                put = self._prepare(op)
                puts[(put.name, put.key)] = put
        results: list[Result] = [None] * len(ops)
        with self._lock:
            self._check_targets(list(puts.values()))
            for i, op in enumerate(ops):
                if isinstance(op, GetOp):
                    results[i] = self._get(op.namespace, op.key)
                elif isinstance(op, SearchOp):
                    results[i] = self._search(op)
                elif isinstance(op, ListNamespacesOp):
                    results[i] = self._list_namespaces(op)
        self._apply_puts(list(puts.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Chroma and SQLite calls block, so the batch runs in a worker thread: strata's own, as `Memory`'s
        async calls do (a put may wait for its namespace's gate, which a run on the loop's threads holds)."""
        from strata.api import _in_thread  # (the API builds on this module's neighbours)

        return await _in_thread(self.batch, list(ops))

    @contextlib.contextmanager
    def _writing(self, names: Sequence[str]) -> Iterator[Callable[[str], contextlib.AbstractContextManager[None]]]:
        """The run gates of the namespaces a batch writes (memory/run_gate.py), as a run that reads takes them:
        a put goes on beside ingests and questions, never beside an erase or a drop, which it would write back
        into; across processes too. Yields what each namespace's writes are wrapped in.

        Off an event loop each namespace's gate is waited for around its own writes only: a batch that held
        one while waiting for another's (behind an erase) closed a cycle with a run of the second putting
        into the first. On an event loop's thread (a sync `put` in an async node) nothing may wait: what
        it waits for, a run on that very loop or an erase waiting for one, would never end. There every gate
        is taken at once, before any write, or the batch is refused in one line, nothing written, pointing to
        `aput`/`abatch`, which wait off the loop. Refused rather than written ungated: a put beside an erase
        writes back into what the erase removes, and a refusal loses nothing the caller does not know of."""
        if not _on_event_loop():
            yield lambda name: run_gate(self.settings, name).holding("read")
            return
        with contextlib.ExitStack() as held:
            for name in names:
                held.enter_context(run_gate(self.settings, name).holding_now("read", _busy_on_loop(name)))
            yield lambda _: contextlib.nullcontext()

    # reading -------------------------------------------------------------
    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        name = namespace_name(namespace)
        store = self._open_existing(name)
        if store is None:
            return None
        found = self._live_item(store, namespace, key)
        if found is not None:
            return found.item
        if self.include_memory:
            return _memory_item(store, namespace, key)
        return None

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit <= 0:
            return []
        query = (op.query or "").strip()
        candidates: list[_Candidate] = []
        scores: dict[tuple[tuple[str, ...], str], float] = {}
        vector: np.ndarray | None = None
        for namespace in self._namespaces():
            if tuple(namespace[: len(op.namespace_prefix)]) != _composed(op.namespace_prefix):
                continue
            store = self._open_existing(namespace_name(namespace))
            if store is None:
                continue
            found = [c for c in self._candidates(store, namespace) if matches(c.item.value, op.filter)]
            candidates.extend(found)
            if query and found:
                if vector is None:
                    vector = store.embedder.embed([query])[0]
                store.check_vectors(len(vector))  # each namespace's embedder, before its vectors meet the query's
                scores.update(_similarities(store, vector, found, op.offset + op.limit))
        # one order for every namespace and kind: the cosine similarity, which is the score returned
        scored = [c for c in candidates if c.ranked and (c.item.namespace, c.item.key) in scores]
        scored.sort(key=lambda c: (scores[(c.item.namespace, c.item.key)], c.item.updated_at), reverse=True)
        rest = [c for c in candidates if not (c.ranked and (c.item.namespace, c.item.key) in scores)]
        rest.sort(key=lambda c: c.item.updated_at, reverse=True)
        page = [*scored, *rest][op.offset : op.offset + op.limit]
        return [
            SearchItem(
                namespace=c.item.namespace, key=c.item.key, value=c.item.value, created_at=c.item.created_at,
                updated_at=c.item.updated_at, score=scores.get((c.item.namespace, c.item.key)) if query else None,
            )
            for c in page
        ]

    def _candidates(self, store: MemoryStore, namespace: tuple[str, ...]) -> list[_Candidate]:
        """Every live item of a namespace: stored items, then (optionally) the graph's records."""
        found = self._items(store, namespace)
        if self.include_memory:
            taken = {c.item.key for c in found}
            for kind in KINDS:
                for record in store.all(kind):
                    if record.id.startswith(ITEM_PREFIX) or record.id in taken:
                        continue
                    found.append(_Candidate(item=_record_item(namespace, record), record_id=record.id, ranked=True))
        return found

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = [ns for ns in self._namespaces() if self._has_live_items(ns)]
        if op.match_conditions:
            namespaces = [ns for ns in namespaces if all(_namespace_matches(c, ns) for c in op.match_conditions)]
        if op.max_depth is not None:
            namespaces = list({ns[: op.max_depth] for ns in namespaces})
        return sorted(set(namespaces))[op.offset : op.offset + op.limit]

    def _has_live_items(self, namespace: tuple[str, ...]) -> bool:
        store = self._open_existing(namespace_name(namespace))
        return store is not None and bool(self._candidates(store, namespace))

    # writing -------------------------------------------------------------
    def _prepare(self, op: PutOp) -> _Put:
        """A put's namespace name, JSON value and indexed text, or the error it would raise mid-batch."""
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        name = namespace_name(op.namespace)
        if op.value is None:
            return _Put(name, tuple(op.namespace), op.key, None, "", False)
        if self.include_memory and _names_a_record(op.key):
            raise InputError(
                f"the key {op.key!r} has the form of a memory record's id ({', '.join(k + ':' for k in KINDS)}...), "
                "which this store shows as items (include_memory=True): put the item under another key, or open "
                "the store with include_memory=False; nothing was written")
        value = _json_value(op.value)
        text, indexed = self._text_of(value, op.index)
        check_text(text, "a store value's indexed text")
        return _Put(name, tuple(op.namespace), op.key, value, text, indexed)

    def _check_targets(self, puts: list[_Put]) -> None:
        """Refuse a put whose record id (raw:item:<key>) is held by a record that is not a store item,
        e.g. a turn ingested with dia_id 'item:<key>' by an earlier version: it would be overwritten."""
        for put in puts:
            if put.value is None:
                continue
            store = self._open_existing(put.name)
            if store is None:
                continue
            if store.get([ITEM_PREFIX + put.key]) and store_items.newest(
                    self._ledger(), store.namespace, put.key) is None:
                raise InputError(
                    f"the record {ITEM_PREFIX + put.key!r} of namespace {put.name!r} is not a store item (a turn "
                    "holds that id): put this item under another key; nothing was written"
                )

    def _apply_puts(self, puts: list[_Put]) -> None:
        by_namespace: dict[str, list[_Put]] = {}
        for put in puts:
            by_namespace.setdefault(put.name, []).append(put)
        with self._writing(sorted(by_namespace)) as gated:
            for name, group in by_namespace.items():
                # the gate before the store's lock: a put waiting at a gate behind an erase held it, and a run's
                # node that put into the store waited for it while the erase waited for that run
                with gated(name), self._lock:
                    self._apply_group(name, group)

    def _apply_group(self, name: str, group: list[_Put]) -> None:
        deletes = [put for put in group if put.value is None]
        writes = [put for put in group if put.value is not None]
        if deletes:
            store = self._open_existing(name)
            if store is not None:
                for put in deletes:
                    self._delete(store, put.key)
        if writes:
            self._write(open_store(self.settings, name), writes)

    def _write(self, store: MemoryStore, puts: list[_Put]) -> None:
        """New keys are embedded together; changed keys go through `update` so history keeps the old text.

        One step under the namespace's write lock, across processes too: whether a key exists, its version
        and its record. Two puts of one new key (two processes, or two stores in one) each found it absent,
        and one's first version deleted the other's: the value read was one put's, the record searched the
        other's. Each write leaves one version per text the key had (the older rows of the same text go), so
        its cost does not grow with the number of overwrites."""
        with store.writing():
            self._write_held(store, puts)

    def _write_held(self, store: MemoryStore, puts: list[_Put]) -> None:
        now = datetime.now(UTC)
        ledger = self._ledger()
        fresh: list[Record] = []
        unbacked: list[int] = []  # versions written whose record is not written yet: taken back on a failure
        try:
            for put in puts:
                assert put.value is not None
                record_id = ITEM_PREFIX + put.key
                existing = store.get([record_id])
                previous = self._live_item(store, (), put.key) if existing else None
                created = previous.item.created_at if previous is not None else now
                same = bool(existing) and existing[0].status == Status.ACTIVE and existing[0].text == put.text
                seq = store_items.insert_version(
                    ledger, store.namespace, put.key, put.value, put.text, put.indexed, created, now, prune=same,
                    first=not existing,
                )
                if not existing:
                    fresh.append(_item_record(store.namespace, put.key, put.text, now))
                    unbacked.append(seq)
                    continue
                if same:
                    continue  # same text: the new version row is the whole change
                unbacked.append(seq)
                store.update(record_id, put.text, reason=f"put through the LangGraph store (key {put.key!r})",
                             policy="user")
                unbacked.remove(seq)
                store_items.prune_older(ledger, store.namespace, put.key, put.text, seq)
            if fresh:
                store.add(fresh)
        except Exception:
            # (a full disk may refuse this too: such a version is read by no get, search or export, as no
            # record holds it, and the key's next put replaces it: `insert_version`'s `first`)
            with contextlib.suppress(Exception):
                self._delete_versions(unbacked)
            raise

    def _delete(self, store: MemoryStore, key: str) -> None:
        """Tombstone (undoable); LangGraph's contract that `get` then returns None holds."""
        reason = f"deleted through the LangGraph store (key {key!r})"
        with store.writing():  # (one step: what it found is what it deletes)
            held = self._live_item(store, (), key) is not None  # an item deleted already hides nothing
            targets = [ITEM_PREFIX + key] if held else []
            if not held and self.include_memory and _names_a_record(key):
                targets.append(key)  # a record the graph wrote, shown under its id (an item of that key hides it)
            for record in store.get(targets):
                if record.status == Status.ACTIVE:
                    store.delete(record.id, reason=reason, policy="user")

    def _text_of(self, value: dict[str, Any], index: Any) -> tuple[str, bool]:
        """What gets embedded and matched: the indexed fields' text, or every string in the value."""
        if index is False:
            return _all_strings(value) or _dump(value), False
        paths = index if index is not None else self.index_fields
        if not paths:
            return _all_strings(value) or _dump(value), True
        texts: list[str] = []
        for path in paths:
            texts.extend(get_text_at_path(value, path if path == "$" else tokenize_path(path)))
        text = "\n".join(t for t in texts if t.strip())
        return text or _dump(value), True

    # the item table ----------------------------------------------------
    def _delete_versions(self, seqs: list[int]) -> None:
        store_items.delete_versions(self._ledger(), seqs)

    def _live_item(self, store: MemoryStore, namespace: tuple[str, ...], key: str) -> _Candidate | None:
        """The current value of a key, or None when it was deleted (its record is a tombstone) or is no
        store item; one or two rows read, however often the key was overwritten."""
        records = store.get([ITEM_PREFIX + key])
        if not records or records[0].status != Status.ACTIVE:
            return None
        version = store_items.newest(self._ledger(), store.namespace, key)
        if version is None:
            return None
        return self._candidate(store, namespace, records[0], version)

    def _items(self, store: MemoryStore, namespace: tuple[str, ...]) -> list[_Candidate]:
        """Every live stored item of a namespace: each key's newest version, read by its sequence number."""
        ledger = self._ledger()
        newest = store_items.newest_seqs(ledger, store.namespace)
        if not newest:
            return []
        records = {r.id: r for r in store.get(ITEM_PREFIX + key for key in newest)}
        live = {key: r for key in newest if (r := records.get(ITEM_PREFIX + key)) and r.status == Status.ACTIVE}
        rows = {v.key: v for v in store_items.by_seq(ledger, [newest[key] for key in live])}
        found: list[_Candidate] = []
        for key, record in live.items():
            version = rows.get(key) or store_items.newest(ledger, store.namespace, key)
            if version is not None:
                found.append(self._candidate(store, namespace, record, version))
        return found

    def _candidate(
        self, store: MemoryStore, namespace: tuple[str, ...], record: Record, newest: ItemVersion
    ) -> _Candidate:
        """The value is the newest version whose text the record holds, so after an undo the value the
        restored text came from is the one returned (the newest version when none holds it)."""
        chosen = newest
        if newest.text != record.text:
            chosen = store_items.newest(self._ledger(), store.namespace, newest.key, record.text) or newest
        item = Item(
            value=dict(chosen.value), key=chosen.key, namespace=namespace, created_at=chosen.created_at,
            updated_at=chosen.updated_at,
        )
        return _Candidate(item=item, record_id=record.id, ranked=chosen.indexed)

    # namespaces ----------------------------------------------------------
    def _namespaces(self) -> list[tuple[str, ...]]:
        """Namespaces with items, plus (with include_memory) those the memory graph wrote."""
        names = store_items.namespaces(self._ledger())
        if self.include_memory:
            names |= self._chroma_namespaces()
        # composed: a memory an earlier version stored under another spelling is listed as it opens
        return sorted({namespace_labels(unicodedata.normalize("NFC", name)) for name in names if name})

    def _chroma_namespaces(self, only: str | None = None) -> set[str]:
        """The namespaces the memory graph wrote on this store's Chroma that this ledger may open
        (memory/catalog.py)."""
        return chroma_namespaces(self.settings, self._ledger(), only)

    def _open_existing(self, name: str) -> MemoryStore | None:
        """The namespace's memory if anything was ever written there (reads never create collections), under
        the spelling it is stored under (memory/registry.py `stored_name`)."""
        name = stored_name(self.settings, check_namespace(name))
        known = store_items.has_items(self._ledger(), name)
        if not known and not (self.include_memory and name in self._chroma_namespaces(name)):
            return None
        return open_store(self.settings, name)


# namespaces and values -------------------------------------------------------
def _on_event_loop() -> bool:
    """Whether this thread runs an event loop now (where a call must never wait for the gate)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _busy_on_loop(name: str) -> str:
    return (f"the namespace {name!r} is being erased or dropped, and a sync put on an event loop cannot wait for "
            "that without stopping the loop: use `await store.aput(...)` (or `abatch`) in async code; nothing was "
            "written")


def namespace_name(namespace: Sequence[str]) -> str:
    """The memory namespace of a LangGraph namespace tuple: labels joined by "/", each character a memory
    namespace does not allow written `.<hex>.` (a label LangGraph accepts holds no "."), so the mapping is
    reversible and a label of allowed characters is its own name (composed: memory/namespaces.py)."""
    name = SEPARATOR.join(_encode_label(label) for label in namespace)
    if len(name) > MAX_LENGTH:
        raise InvalidNamespaceError(
            f"namespace {shown_value(namespace)} is {len(name)} characters as a memory namespace (at most "
            f"{MAX_LENGTH}; a character other than letters, digits and _ - @ + counts as its .<hex>. code): "
            "use shorter labels"
        )
    return name


def namespace_labels(name: str) -> tuple[str, ...]:
    """The LangGraph namespace tuple of a memory namespace name (`namespace_name` undone)."""
    return tuple(_decode_label(label) for label in name.split(SEPARATOR))


def _encode_label(label: str) -> str:
    """A label as a memory namespace's: composed (NFC), so "José" typed with a separate accent is the
    namespace `Memory("users/José")` opens; a combining mark after a letter, digit or mark stays
    as it is (memory/namespaces.py), any other character the rule refuses becomes `.<hex>.`."""
    label = _composed((label,))[0]
    kept: list[str] = []
    for c in label:
        # the character written before it: an escape ends in ".", which no mark may follow
        previous = kept[-1][-1] if kept else ""
        kept.append(c if c.isalnum() or c in _PLAIN_MARKS or mark_after(previous, c) else f".{ord(c):x}.")
    return "".join(kept)


def _composed(labels: Sequence[str]) -> tuple[str, ...]:
    """Labels as a stored namespace reads them back: composed (NFC, memory/namespaces.py), so a prefix or a
    match typed with a separate accent (or Hangul as jamo) finds what `get` finds under either spelling."""
    return tuple(unicodedata.normalize("NFC", label) for label in labels)


def _decode_label(label: str) -> str:
    """A label written by `_encode_label`, or the label as it is when it was not (a memory's own
    namespace may hold a "." of its own)."""
    if "." not in label:
        return label
    try:
        decoded = _ESCAPED.sub(lambda m: chr(int(m[1], 16)), label)
    except (ValueError, OverflowError):
        return label
    if "\x00" in decoded or "." in decoded:  # no LangGraph label holds these: "v1.0.1" is a memory's own name
        return label
    return decoded if _encode_label(decoded) == label else label


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Prefix or suffix match with "*" as a one-label wildcard."""
    path = _composed(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InputError(f"unknown namespace match {condition.match_type!r}: use prefix or suffix")
    return all(want == "*" or got == want for got, want in pairs)


def matches(value: dict[str, Any], where: dict[str, Any] | None) -> bool:
    """LangGraph's filter semantics: exact values, nested dicts, dotted paths and $-operators."""
    if not where:
        return True
    return all(_compare(_lookup(value, key), expected) for key, expected in where.items())


def _lookup(value: dict[str, Any], key: str) -> Any:
    if key in value:
        return value[key]
    current: Any = value
    for part in key.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


def _compare(actual: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        operators = [k for k in expected if k.startswith("$")]
        if operators:
            return all(_apply(actual, op, operand) for op, operand in expected.items())
        return isinstance(actual, dict) and all(_compare(_lookup(actual, k), v) for k, v in expected.items())
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(actual, (list, tuple)) and len(actual) == len(expected)
            and all(_compare(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return bool(actual == expected)


def _apply(actual: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(actual == operand)
    if operator == "$ne":
        return bool(actual != operand)
    if operator in ("$in", "$nin"):
        if not isinstance(operand, (list, tuple, set)):
            raise InputError(f"filter {operator} needs a list, got {type(operand).__name__}")
        return (actual in operand) == (operator == "$in")
    if operator not in _OPERATORS:
        raise InputError(f"unknown filter operator {operator!r}: use one of {', '.join(_OPERATORS)}")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (actual, operand))
    if not numbers and not (isinstance(actual, str) and isinstance(operand, str)):
        return False
    if operator == "$gt":
        return bool(actual > operand)
    if operator == "$gte":
        return bool(actual >= operand)
    if operator == "$lt":
        return bool(actual < operand)
    return bool(actual <= operand)


def _check_op(op: Op) -> None:
    """The arguments of one operation, by type, before any is run: LangGraph's own checks are the labels'
    (`validate_op_namespace`); a text namespace, a number as a key or a list as a filter would otherwise
    be stored under another name or fail deep inside. One line each."""
    if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
        raise InputError(f"batch takes store operations (GetOp, PutOp, SearchOp, ListNamespacesOp), not "
                         f"{type(op).__name__}")
    prefixes = (op.namespace_prefix,) if isinstance(op, SearchOp) else (
        (op.match_conditions or ()) if isinstance(op, ListNamespacesOp) else (op.namespace,))
    for namespace in prefixes:
        path = namespace.path if isinstance(namespace, MatchCondition) else namespace
        if not isinstance(path, tuple) or not all(isinstance(label, str) for label in path):
            raise InputError(f"a store namespace is a tuple of text labels, e.g. ('users', 'ann'), not {path!r}")
        for label in path:
            check_text(label, "a namespace label")
    if isinstance(op, GetOp | PutOp):
        if not isinstance(op.key, str):
            raise InputError(f"a store key is text, not {type(op.key).__name__} ({op.key!r}): use str(key)")
        check_text(op.key, "a store key")
    if isinstance(op, PutOp) and not (op.index is None or op.index is False or (
            isinstance(op.index, list) and all(isinstance(f, str) for f in op.index))):
        raise InputError(f"index is False, None or a list of field paths, not {op.index!r}")
    if isinstance(op, SearchOp):
        if op.query is not None and not isinstance(op.query, str):
            raise InputError(f"a search query is text, not {type(op.query).__name__}")
        if op.query is not None:
            check_text(op.query, "a search query")
        if op.filter is not None and not (isinstance(op.filter, dict) and all(isinstance(k, str) for k in op.filter)):
            raise InputError(f"a search filter is a dict of field names, e.g. {{'type': 'note'}}, not {op.filter!r}")
    for name in ("limit", "offset", "max_depth"):
        if not hasattr(op, name):
            continue
        value = getattr(op, name)
        if value is None and name == "max_depth":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{name} must be a whole number of at least 0, not {value!r}")


def _json_value(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"a store value must be a dict, got {type(value).__name__}: wrap it, e.g. {{'text': ...}}")
    try:
        problem = store_items.value_problem(value)  # what the export could not write back as it was put
        if problem is not None:
            raise InputError(f"a store value is refused: {problem}")
        text = json.dumps(value, ensure_ascii=False)
        check_text(text, "a store value")
        loaded: dict[str, Any] = json.loads(text)
        found = first_unstorable(loaded)
        if found is not None:
            raise InputError(f"a store value is refused: {found}")
        return loaded
    except InputError:
        raise
    except RecursionError:
        raise InputError("a store value is nested too deeply: store a flatter dict") from None
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"a store value must be JSON-serialisable ({exc}): store dicts of lists, strings and numbers"
        ) from exc


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _all_strings(value: Any) -> str:
    """Every string in a value, depth first: the default text to embed and match."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        parts = [_all_strings(v) for v in value.values()]
    elif isinstance(value, (list, tuple)):
        parts = [_all_strings(v) for v in value]
    else:
        return ""
    return "\n".join(p for p in parts if p)


# items and records -------------------------------------------------------------
def _names_a_record(key: str) -> bool:
    """Whether a key has the form of a record id the memory graph writes (`raw:D1:3`, `fact:D1:3:0`), which
    `include_memory` shows as an item: an app's item of that key would hide the record, and take it along
    when deleted."""
    return ":" in key and not key.startswith(ITEM_PREFIX) and key.split(":", 1)[0] in KINDS


def _item_record(namespace: str, key: str, text: str, now: datetime) -> Record:
    """A raw-like record: the graph's research finds stored items beside the turns."""
    return Record(
        id=ITEM_PREFIX + key, kind="raw", text=text, namespace=namespace, dialogue_id=f"item:{key}",
        time=now.astimezone(UTC).replace(tzinfo=None), policy="user",
    )


def _record_item(namespace: tuple[str, ...], record: Record) -> Item:
    """A record the memory graph wrote, shown as a store item keyed by its id."""
    data = record.model_dump(mode="json", exclude={"id", "namespace", "status", "version"})
    value = {k: v for k, v in data.items() if v not in ("", None, [])}
    moment = record.time or _EPOCH
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return Item(value=value, key=record.id, namespace=namespace, created_at=moment, updated_at=moment)


def _memory_item(store: MemoryStore, namespace: tuple[str, ...], key: str) -> Item | None:
    if key.startswith(ITEM_PREFIX):
        return None
    try:
        kind_of(key)
    except InputError:  # not a memory id: no record of the memory is this item
        return None
    records = store.get([key])
    if not records or records[0].status != Status.ACTIVE:
        return None
    return _record_item(namespace, records[0])


def _similarities(
    store: MemoryStore, vector: np.ndarray, candidates: list[_Candidate], wanted: int
) -> dict[tuple[tuple[str, ...], str], float]:
    """The cosine similarity of the query and each ranked candidate's stored vector, as LangGraph's
    stores score: the same measure in every namespace and kind, so the results of many compare.

    A kind's candidates are scored from their own vectors when they are few; else its nearest records
    are read, enough of them (`wanted` plus every active record that is no candidate) that the best
    `wanted` candidates are among them, however many other records (turns, unindexed items) the kind holds.
    """
    key_of: dict[Kind, dict[str, tuple[tuple[str, ...], str]]] = {}
    for c in candidates:
        if c.ranked:
            key_of.setdefault(kind_of(c.record_id), {})[c.record_id] = (c.item.namespace, c.item.key)
    query = np.asarray(vector, dtype=np.float32)
    query = query / (float(np.linalg.norm(query)) or 1.0)
    scores: dict[tuple[tuple[str, ...], str], float] = {}
    for kind, keys in key_of.items():
        pool = wanted + max(len(store.active(kind)) - len(keys), 0)
        ids = list(keys) if len(keys) <= pool else [rid for rid, _ in store.dense(kind, query, pool) if rid in keys]
        for rid, stored in store.vectors(ids).items():
            norm = float(np.linalg.norm(stored)) or 1.0
            scores[keys[rid]] = float(np.dot(query, stored)) / norm
    return scores

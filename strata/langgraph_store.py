"""A LangGraph `BaseStore` backed by this memory, for apps that already use `store=`.

An app that compiles its own graph with `builder.compile(store=StrataStore(...))`
gets durable items and this project's retrieval behind `store.search`: dense
and BM25 lists fused by reciprocal rank (AdaMem's keyword back-off, MAGMA's
RRF fusion), over the same Chroma collections the memory graph writes.

Mapping:
- a namespace tuple is one memory namespace, its labels joined with "/"
  (`("users", "ann")` is the namespace `users/ann`, what `Memory("users/ann")` opens);
- an item is a raw-like record `raw:item:<key>` whose text is the value's text
  fields (what gets embedded and matched); the full value, its versions and its
  timestamps live in the ledger's `store_items` table (memory/store_items.py):
  the SQLite file, or the PostgreSQL database replicas share (`ledger_url`);
- `delete` tombstones the record through `MemoryStore.delete`, so it is in
  the history and `Memory.undo` brings it back; `get` returns None meanwhile;
- overwriting a key goes through `MemoryStore.update` (old text in history);
- with `include_memory=True` (the default) the records the memory graph
  wrote (turns, facts, episodes, persona traits) are items too, keyed by their
  record id, so `store.search(("ann",), query=...)` also finds what a
  conversation ingested into `Memory("ann")` holds.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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
from strata.memory.chroma import open_client
from strata.memory.errors import InputError, check_utf8
from strata.memory.ledger import Ledger
from strata.memory.records import KINDS, Record, Status
from strata.memory.registry import ledger_for, open_store
from strata.memory.reindex import REBUILT_SUFFIX
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore, kind_of
from strata.memory.store_items import ITEM_PREFIX, ItemVersion

SEPARATOR = "/"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")

@dataclass(frozen=True)
class _Candidate:
    """A live item of one namespace, with the record that carries its text."""

    item: Item
    record_id: str
    ranked: bool  # False for items put with index=False: found by filters, never by a query


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
        """Reads first, then writes (the last put of a key wins), as LangGraph's own stores do."""
        if not isinstance(ops, Iterable) or isinstance(ops, str | bytes):
            raise InputError(f"batch takes a list of store operations (GetOp, PutOp, ...), not {type(ops).__name__}")
        ops = list(ops)
        for op in ops:
            _check_op(op)
            validate_op_namespace(op)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        with self._lock:
            for i, op in enumerate(ops):
                if isinstance(op, GetOp):
                    results[i] = self._get(op.namespace, op.key)
                elif isinstance(op, SearchOp):
                    results[i] = self._search(op)
                elif isinstance(op, ListNamespacesOp):
                    results[i] = self._list_namespaces(op)
                elif isinstance(op, PutOp):
                    puts[(tuple(op.namespace), op.key)] = op
                else:
                    raise InputError(
                        f"unknown store operation {type(op).__name__}: use GetOp, PutOp, SearchOp or ListNamespacesOp"
                    )
            self._apply_puts(list(puts.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Chroma and SQLite calls block, so the batch runs in a worker thread."""
        return await asyncio.to_thread(self.batch, list(ops))

    # reading -------------------------------------------------------------
    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        name = namespace_name(namespace)
        store = self._open_existing(name)
        if store is None:
            return None
        versions = self._versions(name, key)
        if versions:
            found = _live_item(store, namespace, key, versions)
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
        for namespace in self._namespaces():
            if tuple(namespace[: len(op.namespace_prefix)]) != tuple(op.namespace_prefix):
                continue
            store = self._open_existing(namespace_name(namespace))
            if store is None:
                continue
            found = [c for c in self._candidates(store, namespace) if matches(c.item.value, op.filter)]
            candidates.extend(found)
            if query and found:
                scores.update(_rank(store, namespace, query, found, op.offset + op.limit, everything=bool(op.filter)))
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
        name = namespace_name(namespace)
        by_key: dict[str, list[ItemVersion]] = {}
        for version in self._versions(name):
            by_key.setdefault(version.key, []).append(version)
        found: list[_Candidate] = []
        for key, versions in by_key.items():
            candidate = _live_item(store, namespace, key, versions)
            if candidate is not None:
                found.append(candidate)
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
    def _apply_puts(self, puts: list[PutOp]) -> None:
        by_namespace: dict[str, list[PutOp]] = {}
        for op in puts:
            if not op.namespace:
                raise InvalidNamespaceError("Namespace cannot be empty.")
            by_namespace.setdefault(namespace_name(op.namespace), []).append(op)
        for name, ops in by_namespace.items():
            deletes = [op for op in ops if op.value is None]
            writes = [op for op in ops if op.value is not None]
            if deletes:
                store = self._open_existing(name)
                if store is not None:
                    for op in deletes:
                        self._delete(store, op.key)
            if writes:
                self._write(open_store(self.settings, name), writes)

    def _write(self, store: MemoryStore, ops: list[PutOp]) -> None:
        """New keys are embedded together; changed keys go through `update` so history keeps the old text."""
        now = datetime.now(UTC)
        fresh: list[Record] = []
        fresh_rows: list[int] = []
        for op in ops:
            value = _json_value(op.value)
            text, indexed = self._text_of(value, op.index)
            record_id = ITEM_PREFIX + op.key
            existing = store.get([record_id])
            previous = _live_item(store, (), op.key, self._versions(store.namespace, op.key)) if existing else None
            created = previous.item.created_at if previous is not None else now
            seq = self._insert_version(store.namespace, op.key, value, text, indexed, created, now)
            if not existing:
                fresh.append(_item_record(store.namespace, op.key, text, now))
                fresh_rows.append(seq)
                continue
            record = existing[0]
            if record.status == Status.ACTIVE and record.text == text:
                continue  # same text: the new version row is the whole change
            try:
                store.update(record_id, text, reason=f"put through the LangGraph store (key {op.key!r})", policy="user")
            except Exception:
                self._delete_versions([seq])
                raise
        if fresh:
            try:
                store.add(fresh)
            except Exception:
                self._delete_versions(fresh_rows)
                raise

    def _delete(self, store: MemoryStore, key: str) -> None:
        """Tombstone (undoable); LangGraph's contract that `get` then returns None holds."""
        reason = f"deleted through the LangGraph store (key {key!r})"
        targets = [ITEM_PREFIX + key] if self._versions(store.namespace, key) else []
        if self.include_memory and not key.startswith(ITEM_PREFIX) and key.split(":", 1)[0] in KINDS:
            targets.append(key)  # a record the graph wrote, shown under its id
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
    def _insert_version(
        self, namespace: str, key: str, value: dict[str, Any], text: str, indexed: bool,
        created: datetime, updated: datetime,
    ) -> int:
        return store_items.insert_version(self._ledger(), namespace, key, value, text, indexed, created, updated)

    def _delete_versions(self, seqs: list[int]) -> None:
        store_items.delete_versions(self._ledger(), seqs)

    def _versions(self, namespace: str, key: str | None = None) -> list[ItemVersion]:
        return store_items.versions(self._ledger(), namespace, key)

    # namespaces ----------------------------------------------------------
    def _namespaces(self) -> list[tuple[str, ...]]:
        """Namespaces with items, plus (with include_memory) those the memory graph wrote."""
        names = store_items.namespaces(self._ledger())
        if self.include_memory:
            names |= self._chroma_namespaces()
        return sorted(tuple(name.split(SEPARATOR)) for name in names if name)

    def _chroma_namespaces(self) -> set[str]:
        names: set[str] = set()
        for collection in open_client(self.settings).list_collections():
            metadata = getattr(collection, "metadata", None) or {}
            if collection.name.endswith(REBUILT_SUFFIX):
                continue  # a rebuild's copy (memory/reindex.py), not a namespace of its own
            if metadata.get("kind") in KINDS and isinstance(metadata.get("namespace"), str):
                names.add(metadata["namespace"])
        return names

    def _open_existing(self, name: str) -> MemoryStore | None:
        """The namespace's memory if anything was ever written there (reads never create collections)."""
        known = store_items.has_items(self._ledger(), name)
        if not known and not (self.include_memory and name in self._chroma_namespaces()):
            return None
        return open_store(self.settings, name)


# namespaces and values -------------------------------------------------------
def namespace_name(namespace: Sequence[str]) -> str:
    """The memory namespace of a LangGraph namespace tuple."""
    for label in namespace:
        if SEPARATOR in label:
            raise InvalidNamespaceError(
                f"namespace label {label!r} contains {SEPARATOR!r}, which joins labels here: use another character"
            )
    return SEPARATOR.join(namespace)


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Prefix or suffix match with "*" as a one-label wildcard."""
    path = tuple(condition.path)
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
            check_utf8(label, "a namespace label")
    if isinstance(op, GetOp | PutOp):
        if not isinstance(op.key, str):
            raise InputError(f"a store key is text, not {type(op.key).__name__} ({op.key!r}): use str(key)")
        check_utf8(op.key, "a store key")
    if isinstance(op, PutOp) and not (op.index is None or op.index is False or (
            isinstance(op.index, list) and all(isinstance(f, str) for f in op.index))):
        raise InputError(f"index is False, None or a list of field paths, not {op.index!r}")
    if isinstance(op, SearchOp):
        if op.query is not None and not isinstance(op.query, str):
            raise InputError(f"a search query is text, not {type(op.query).__name__}")
        if op.query is not None:
            check_utf8(op.query, "a search query")
        if op.filter is not None and not (isinstance(op.filter, dict) and all(isinstance(k, str) for k in op.filter)):
            raise InputError(f"a search filter is a dict of field names, e.g. {{'type': 'note'}}, not {op.filter!r}")
    for name in ("limit", "offset", "max_depth"):
        value = getattr(op, name, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InputError(f"{name} must be a whole number of at least 0, not {value!r}")


def _json_value(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"a store value must be a dict, got {type(value).__name__}: wrap it, e.g. {{'text': ...}}")
    try:
        text = json.dumps(value, ensure_ascii=False)
        check_utf8(text, "a store value")
        return json.loads(text)
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
def _item_record(namespace: str, key: str, text: str, now: datetime) -> Record:
    """A raw-like record: the graph's research finds stored items beside the turns."""
    return Record(
        id=ITEM_PREFIX + key, kind="raw", text=text, namespace=namespace, dialogue_id=f"item:{key}",
        time=now.astimezone(UTC).replace(tzinfo=None), policy="user",
    )


def _live_item(
    store: MemoryStore, namespace: tuple[str, ...], key: str, versions: list[ItemVersion]
) -> _Candidate | None:
    """The current value of a key, or None when it was deleted (its record is a tombstone).

    The value is the newest version whose text the record holds, so after an
    undo the value the restored text came from is the one returned.
    """
    if not versions:
        return None
    records = store.get([ITEM_PREFIX + key])
    if not records or records[0].status != Status.ACTIVE:
        return None
    text = records[0].text
    chosen = next((v for v in reversed(versions) if v.text == text), versions[-1])
    item = Item(
        value=dict(chosen.value), key=key, namespace=namespace, created_at=chosen.created_at,
        updated_at=chosen.updated_at,
    )
    return _Candidate(item=item, record_id=records[0].id, ranked=chosen.indexed)


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


def _rank(
    store: MemoryStore, namespace: tuple[str, ...], query: str, candidates: list[_Candidate], wanted: int,
    everything: bool,
) -> dict[tuple[tuple[str, ...], str], float]:
    """Hybrid (dense + BM25, RRF) scores of a namespace's candidates, searched per granularity.

    With a filter every record is ranked (the filtered few may sit anywhere);
    without one, a pool a few times the page is enough.
    """
    key_of = {c.record_id: c.item.key for c in candidates if c.ranked}
    vector = store.embedder.embed([query])[0]
    scores: dict[tuple[tuple[str, ...], str], float] = {}
    for kind in KINDS:
        active = sum(1 for rid in key_of if rid.startswith(f"{kind}:"))
        if active == 0:
            continue
        total = len(store.all(kind))
        k = total if everything else min(total, max(wanted * 3, 50))
        for hit in store.search(kind, query, k, vector=vector):
            key = key_of.get(hit.record.id)
            if key is not None:
                scores[(namespace, key)] = hit.score
    return scores

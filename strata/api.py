"""The Python API: open a memory for a namespace, add turns, ask, chat, undo.

A thin layer over the compiled graph: every call is one graph run with a
runtime context built from the memory's settings, so what the API does is
exactly what Studio and the server do.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from strata.checkpoint import drop_threads, erase_threads
from strata.conversations import read_json_file
from strata.graph.context import Context
from strata.graph.graph import graph
from strata.graph.routing import step_limit
from strata.graph.state import ChangeNote, Evidence, RoleNote, Verdict, validate_turns
from strata.graph.tracing import run_config
from strata.memory.catalog import unknown_namespace
from strata.memory.erasure import (
    ErasurePlan,
    ErasureReport,
    apply_erasure,
    finish_erasure,
    finished_for,
    plan_erasure,
)
from strata.memory.errors import (
    ConfigError,
    InputError,
    NotFoundError,
    check_text,
    shown_value,
)
from strata.memory.failures import in_one_line
from strata.memory.graph.consolidation import ConsolidationReport
from strata.memory.graph.export import MemoryGraph, build_graph, namespace_graph, person_graph
from strata.memory.ledger_sql import LARGEST_INTEGER
from strata.memory.moments import utc_now
from strata.memory.names import blank
from strata.memory.portability import (
    ImportReport,
    MemoryDocument,
    export_memory,
    import_memory,
    read_document,
    revalidated,
)
from strata.memory.records import Change, Record, Turn
from strata.memory.registry import drop_namespace, open_store, set_aside
from strata.memory.run_gate import RunGate, run_gate
from strata.memory.settings import real_folder
from strata.memory.slots import undo as undo_change
from strata.memory.store import DROPPING, MemoryStore, kind_of
from strata.thread_owners import holders_in

TurnLike = Turn | dict[str, Any] | str
_Arguments = TypeVar("_Arguments", bound=BaseModel)
_Method = TypeVar("_Method", bound=Callable[..., Any])
_T = TypeVar("_T")


class Answer(BaseModel):
    """What `ask`, `chat` and `retrieve` return."""

    question: str
    answer: str | None = Field(None, description="None in retrieval-only mode.")
    cited_ids: list[str] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    verdict: Verdict | None = None
    rounds: int = 0
    changes: list[ChangeNote] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    trace: list[RoleNote] = Field(default_factory=list)
    stored_ids: list[str] = Field(default_factory=list)

    def evidence_ids(self) -> list[str]:
        """Dialogue ids of every turn the evidence stands for, in order."""
        return list(dict.fromkeys(i for item in self.evidence for i in item.turn_ids()))

    def explain(self) -> str:
        """How each item reached the context: the lists that found its anchor, then each edge and hop
        (MAGMA's traversal), and what the Judge decided and left out."""
        lines = [f"question: {self.question}"]
        lines += [f"{note.role} ({note.policy}): {note.summary}" for note in self.trace if note.role in
                  ("research", "judge")]
        lines.append(f"{len(self.evidence)} item(s) in the context, in the order the answer reads them:")
        for item in self.evidence:
            lines.append(f"  {item.label or item.id}")
            found = ", ".join(item.found_by) or "search"
            lines.append(f"      found by {found}; score {item.score:g}")
            lines += [f"      {step.describe()}" for step in item.path]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


class DroppedThreads(list[str]):
    """What `drop` returns: the saved threads it deleted, as a list, and `unattributed`, those it kept because
    they say not whose they are (saved before runs recorded their namespace, holding records of no namespace
    or of several: strata/thread_owners.py)."""

    def __init__(self, deleted: Iterable[str] = (), unattributed: Iterable[str] = ()) -> None:
        super().__init__(deleted)
        self.unattributed = list(unattributed)


class IngestReport(BaseModel):
    """What `add` stored."""

    turns: int
    stored_ids: list[str]
    changes: list[ChangeNote] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _said_in_one_line(method: _Method) -> _Method:
    """A Chroma server that stops answering mid-call is an `UnavailableError` of one line (httpx's own
    error, with its traceback, said nothing of what to do), and a disk that fills up mid-write a
    `DiskFullError` (Chroma's InternalError rose out of the graph run): memory/failures.py."""
    @functools.wraps(method)
    def call(memory: Memory, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(memory, *args, **kwargs)
        except Exception as error:
            said = in_one_line(error, memory.context("ask").store_settings())
            if said is None:
                raise
            raise said from error
    return call  # type: ignore[return-value]


class Memory:
    """Long-term memory for one namespace (a user, an agent, a conversation).

    In an async app (a LangGraph server's included) call the `a*` forms, from its graph's nodes too (`aadd`,
    `aundo`, `aend_session`, ...): see "the same calls for async apps" below."""

    def __init__(self, namespace: str | None = None, **settings: Any) -> None:
        """The memory of `namespace` (without one: STRATA_NAMESPACE, then 'default'). `settings` are the fields of
        `strata.graph.Context`, each described there: `data_dir`, `model`, `base_url`, `chroma_host`, `ledger_url`,
        `token_budget`, `k_r`, ... (or `chat_model`, an app's own LangChain chat model). One not given comes from
        its STRATA_<NAME> variable, then its default; they are checked here, so a wrong one fails at once."""
        known = {f.name for f in fields(Context)} - {"namespace", "mode"}
        unknown = set(settings) - known
        if unknown:
            raise InputError(f"unknown setting(s) {', '.join(sorted(unknown))}: use some of {', '.join(sorted(known))}")
        # validate settings now, not at the first call; with no namespace, STRATA_NAMESPACE, then 'default'
        named = {} if namespace is None else {"namespace": namespace}
        first = Context(mode="ask", **named, **settings,  # type: ignore[call-arg]
                        _given=frozenset({*named, *settings}))
        self.namespace: str = first.namespace
        # the folder is found once, here: a relative name read again at each call resolved against the working
        # directory then, which an app may change, and which a call on an event loop reads as it was at import
        # (memory/settings.py `real_folder`), so an async app's calls in worker threads and on its loop split
        # one memory over two folders
        self._settings = {**settings, "data_dir": real_folder(first.data_dir)}

    def context(self, mode: str, **overrides: Any) -> Context:
        """The runtime context of a call: the settings given here are kept even when one equals its default
        (only the others fall back to STRATA_<FIELD>)."""
        given = {**self._settings, **overrides}
        return Context(namespace=self.namespace, mode=mode, **given,  # type: ignore[arg-type, call-arg]
                       _given=frozenset({"namespace", "mode", *given}))

    @property
    def store(self) -> MemoryStore:
        """Direct access to the stores (records, links, history), as they are: a namespace an import has not
        finished included (every call below refuses it)."""
        context = self.context("ask")
        return open_store(context.store_settings(), context.namespace)

    def gate(self) -> RunGate:
        """The namespace's runs (memory/run_gate.py), this process's and, where others share the memory, theirs
        too: an add holds it from its run to the episode it closes, an erase or a drop while it works (and a
        host deleting threads of its own)."""
        context = self.context("ask")
        return run_gate(context.store_settings(), context.namespace)

    def _whole(self) -> MemoryStore:
        """The stores, refused in one line while an import of the namespace has not finished."""
        store = self.store
        store.check_whole()
        return store

    # writing -----------------------------------------------------------
    def add(
        self, turns: TurnLike | Sequence[TurnLike], speaker: str = "user",
        on_turn: Callable[[int], None] | None = None, end_session: bool = False,
    ) -> IngestReport:
        """Store turns (oldest first): a string (said by `speaker`), a dict ({'speaker', 'text', 'time'?,
        'dia_id'?, ...}), a `Turn`, or a list of them. `on_turn(n)` is called as each turn is finished.

        With `end_session`, the episode that ends at the batch's last turn is closed; adding
        a batch again after an interruption does not close an episode a later batch began.
        It waits while another input of the namespace is stored: in an async app, `aadd`.
        """
        _flag(end_session, "end_session")
        if on_turn is not None and not callable(on_turn):
            raise InputError(f"on_turn must be a function taking the number of turns done, not "
                             f"{type(on_turn).__name__}")
        batch = _as_turns(turns, speaker)
        context = self.context("ingest")  # one for the whole call: a model down on one turn stays out after it
        with self.gate().holding("store"):  # another input of this namespace waits for this one
            result = self._run("ingest", {"turns": batch}, on_turn, context=context)
            if end_session:
                from strata.agents.memory import close_open_episode

                close_open_episode(self._whole(), last_turn=batch[-1].dia_id or None, context=context)
        return IngestReport(
            turns=len(batch), stored_ids=result.get("stored_ids", []), changes=result.get("changes", []),
            notes=result.get("notes", []),
        )

    def end_session(self) -> Record | None:
        """Close the open episode now (a session ended); returns the episode written, if any. It waits while an
        input of the namespace is stored: in an async app, `aend_session`."""
        from strata.agents.memory import close_open_episode

        with self.gate().holding("store"):  # the open episode is an input's: not while one is stored
            return close_open_episode(self._whole(), context=self.context("ingest"))

    def consolidate(self, limit: int | None = None) -> ConsolidationReport:
        """The slow path (causal links, denser entity links, summaries) over what was stored since the last run.

        Ingestion never waits on it: call it after an import, at a session's end or on a schedule.
        Stopping it at any moment loses nothing; the next call picks up where it stopped.
        """
        from strata.agents.consolidation import run

        request = checked(_ConsolidateRequest, limit=limit)
        # a run that reads, for the gate: it leaves the turns an ingest is still deriving to the next run (so
        # it goes on beside one), but no erase or drop while it works: a summary told from turns read before
        # an erase was written back after it, with the erased words
        with self.gate().holding("read"):
            return run(self._whole(), self.context("ingest"), request.limit)

    # reading -----------------------------------------------------------
    def ask(self, question: str, refresh: bool = False) -> Answer:
        """Answer from memory without storing the question. A conflict the Judge finds is reported in the
        verdict; `refresh=True` lets it change memory too."""
        return self._answer("ask", question, refresh)

    def retrieve(self, question: str, refresh: bool = False) -> Answer:
        """The validated evidence for a question, without an answer (retrieval-only mode); `refresh` as in ask."""
        return self._answer("retrieve", question, refresh)

    def chat(self, text: str, speaker: str = "user") -> Answer:
        """Store a turn and answer it."""
        if not isinstance(text, str | bytes | bytearray):
            raise InputError(f"chat takes the turn as text, not {type(text).__name__}: e.g. memory.chat('I am Ann')")
        batch = _as_turns(text, speaker)
        result = self._run("chat", {"turns": batch})
        return _answer_from(batch[-1].text, result)

    def _answer(self, mode: str, question: str, refresh: bool = False) -> Answer:
        _flag(refresh, "refresh")
        question = _text(question, "the question")
        if blank(question):
            raise InputError("the question is empty: ask something, e.g. memory.ask('Where does Ann live?')")
        overrides = {"refresh_on_read": True} if refresh else {}
        return _answer_from(question, self._run(mode, {"question": question}, overrides=overrides))

    def explain(self, question: str) -> Answer:
        """The evidence for a question with the path each item was reached by (`Answer.explain()` prints it);
        a read: memory is not changed."""
        return self.retrieve(question)

    def graph(self, question: str | None = None, person: str | None = None) -> MemoryGraph:
        """The namespace's graph, or the neighbourhood of a question (its evidence and the paths that reached
        it) or of a participant; write it with `strata.memory.graph.export.write_graph`."""
        if question is not None and person is not None:
            raise InputError("give a question or a person, not both")
        store = self._whole()
        if person is not None:
            return person_graph(store, _text(person, "the person"))
        if question is None:
            return namespace_graph(store)
        reply = self.retrieve(question)
        roles: dict[str, str] = {}
        edges: list[tuple[str, str, str]] = []
        for item in reply.evidence:
            for step in item.path:
                if step.step == "anchor":
                    roles[step.dst] = "anchor"
                else:
                    edges.append((step.src, step.dst, "/".join(step.via)))
                    roles.setdefault(step.dst, "reached")
            roles.setdefault(item.id, "found")
        ids = [*(e.id for e in reply.evidence), *roles]
        return build_graph(store, ids, f"question: {question}", roles, edges)

    # history -----------------------------------------------------------
    def history(self, record_id: str | None = None, limit: int = 50) -> list[Change]:
        """Changes made to memory, newest first: `record_id`'s alone when given, at most `limit`. Each row has the
        record's text and status before and after. An update, a delete or an evolution can be undone by its id
        (`undo`) once; an undo's own row and a no-op (the Refresher looked and left the record as it was) cannot.
        A record with no changes gives [], and one the namespace does not hold a `NotFoundError`: a misspelt id
        must not read as a record nothing ever changed."""
        query = checked(_HistoryQuery, record_id=record_id, limit=limit)
        store = self._whole()
        if query.record_id is None:
            return store.history(None, query.limit)
        kind_of(query.record_id)  # "'%%%' is not a memory id", as erase and get say it
        changes = store.history(query.record_id, query.limit)
        if not changes and not store.get([query.record_id]):
            raise NotFoundError(f"no record {query.record_id!r} in namespace {self.namespace!r} (never stored, or "
                                "erased): check the id and the namespace")
        return changes

    def undo(self, change_id: int | None = None) -> Change:
        """Reverse a change and the changes made with it: the latest update or delete when no id is
        given (evolutions are many and small, so they are undone by id; see `history()`). A fact it makes
        current again whose slot has a newer value since is superseded by that value, in a change of its
        own (memory/slots.py `undo`), so a slot keeps one current value. It waits while an input of the
        namespace is stored: in an async app, `aundo`."""
        request = checked(_UndoRequest, change_id=change_id)
        # one at a time with the runs that change memory (an input's Refresher, a question's refresh): each
        # decides a slot from records it read before its step, which an undo between them made stale
        with self.gate().holding("store"):
            return undo_change(self._whole(), request.change_id)

    def get(self, ids: Iterable[str]) -> list[Record]:
        """The records of these ids as stored now, whatever their status (superseded and deleted ones too, to see
        what an undo would give back). An id no record has is left out; one that is not a record id at all
        (`raw:`, `fact:`, `episode:`, `persona:` or `summary:`) is refused."""
        return self._whole().get(checked(_Ids, ids=_id_list(ids, "get")).ids)

    def stats(self) -> dict[str, Any]:
        """Counts of the namespace: records of each kind by status, links by type, history rows, working-memory
        rows."""
        return self._whole().stats()

    def erase(self, ids: Iterable[str] = (), about: str | None = None) -> ErasureReport:
        """Remove records for good, with what was derived from them, their links and their history:
        the records named, or every turn one participant said and every fact, persona trait or summary
        about them or naming them (`about`). Unlike a request to forget, this cannot be undone
        (memory/erasure.py says what it reaches on disk)."""
        return self.erase_as_planned(ids, about)[0]

    def erase_as_planned(
        self, ids: Iterable[str] = (), about: str | None = None
    ) -> tuple[ErasureReport, ErasurePlan]:
        """`erase`, and the plan it carried out: for a host that keeps threads of its own (the server's
        routes), which may hold a record stored after it last listed what would go."""
        request = checked(_EraseRequest, ids=_id_list(ids, "erase"), about=about)
        # no run of the namespace while it works: a run saving its thread meanwhile wrote the record back
        with self.gate().holding("close"):
            store = self._whole()
            with store.writing():  # no writer of this namespace between the plan and the erase
                resumed = finish_erasure(store) or store.finished_erasure  # one stopped midway comes first
                store.finished_erasure = None
                try:
                    plan = plan_erasure(store, request.ids, request.about or "")
                except InputError as error:
                    if resumed is None:
                        raise
                    if finished_for(resumed, request.ids, request.about or ""):  # this erase, sent again: done
                        return resumed, ErasurePlan(list(resumed.erased), set(), [], [])
                    raise InputError(f"{error}; an erase stopped midway was finished first "
                                     f"({resumed.summary()})") from None
                store.ledger.check_writable()  # a read-only folder refuses before any thread is deleted
                threads, rebuilt = erase_threads(self.context("ask").data_dir, plan.said, store.namespace,
                                                 holders_in(store.settings))  # may fail
                try:
                    report = apply_erasure(store, plan)
                except BaseException:
                    set_aside(store)  # not served half erased: the next call finishes it first
                    raise
        report.threads, report.threads_compacted = list(threads.threads), rebuilt
        report.threads_unattributed = threads.unattributed
        return report, plan

    def erasure_plan(self, ids: Iterable[str] = (), about: str | None = None) -> ErasurePlan:
        """What `erase` would remove, checked as `erase` checks it; nothing changes."""
        request = checked(_EraseRequest, ids=_id_list(ids, "erase"), about=about)
        return plan_erasure(self._whole(), request.ids, request.about or "")

    # moving a memory -----------------------------------------------------
    def export(self, about: str | None = None) -> MemoryDocument:
        """The namespace's whole memory as one document (`.model_dump_json()` writes it): a backup, or what
        `import_from` writes into another namespace or storage. With `about`, only what is said by or about
        that person (their copy of their data; not importable). memory/portability.py says what it holds.

        A namespace that does not exist here raises `NotFoundError`, naming those that do: its export was an
        empty document that a backup script took for a backup. (The other calls read such a namespace as an
        empty memory, a new user's; `strata` refuses it for every command that does not write.)"""
        request = checked(_ExportRequest, about=about)
        store = self._whole()
        if not store.exists():
            raise NotFoundError(f"{unknown_namespace(store)}: check the namespace's spelling (and data_dir); "
                                "nothing was exported")
        return export_memory(store, request.about or "")

    def import_from(
        self, document: MemoryDocument | dict[str, Any] | str | bytes | os.PathLike[str]
    ) -> ImportReport:
        """Write an export (the document, its JSON text, as text or UTF-8 bytes, or parsed JSON, or the path of
        its file) into this namespace, which must be empty; every record is embedded again with this memory's
        embedder."""
        if isinstance(document, bytes | bytearray):  # a file read in binary mode: JSON text, never a path
            document = _parsed(_text(document, "the export").lstrip("\ufeff"))
        elif isinstance(document, str) and document.lstrip("\ufeff \t\r\n").startswith(("{", "[")):
            document = _parsed(document.lstrip("\ufeff"))  # JSON text; any other text names a file
        elif isinstance(document, str | os.PathLike):
            document = read_json_file(document, "memory")[2]
        document = revalidated(document) if isinstance(document, MemoryDocument) else read_document(document)
        with self.gate().holding("store"):  # an input, whole: not beside another (two found it empty)
            return import_memory(self.store, document, self.context("ingest").max_turn_chars)

    def drop(self, records_elsewhere: bool = False) -> DroppedThreads:
        """Delete this namespace's memory entirely, and the threads saved in the data folder that ran on it
        (strata/checkpoint.py): once the namespace is empty, no erase can find them. The namespace can be
        used again at once. Returns the threads deleted (with those it kept because they say not whose they
        are, `unattributed`).

        The namespace is marked first, and the mark goes with it: a drop stopped between the threads and the
        namespace (a crash, a Chroma server gone) leaves it refused in one line until the drop is run again,
        not served with its threads gone.

        A namespace whose records this memory's Chroma does not hold, while its ledger says they were written
        through another one (or cannot say where), is refused in one line: the SQLite ledger lives in the data
        folder whichever Chroma holds the records, and the drop would delete the ledger's half of an intact
        memory opened with the wrong `chroma_host`. `records_elsewhere=True` drops it all the same (records
        lost for good); the records in the other Chroma are left there.

        Its lock files in `<data_dir>/run_gates/` go last (memory/run_locks.py `FileLocks.remove`)."""
        _flag(records_elsewhere, "records_elsewhere")
        context = self.context("ask")
        # no run of it meanwhile (one saving its thread wrote it back); its lock files go at the end
        with self.gate().dropping():
            store = self.store
            store.ledger.check_writable()  # a read-only folder refuses before any thread is deleted
            refusal = None if records_elsewhere else store.drop_refusal()
            if refusal is not None:  # before any thread is deleted
                raise ConfigError(refusal)
            store.set_state(DROPPING, utc_now().isoformat(timespec="seconds"))
            try:
                threads, _ = drop_threads(context.data_dir, context.namespace, holders_in(store.settings))
            except BaseException:
                store.ledger.clear_state(store.namespace, DROPPING)  # no thread went: nothing was dropped
                raise
            drop_namespace(context.store_settings(), context.namespace, records_elsewhere)  # the mark with it
        return DroppedThreads(threads.threads, threads.unattributed)

    # the same calls for async apps -------------------------------------------
    # Each runs its synchronous twin in a worker thread (the memory is safe to share between threads),
    # so an event loop serving other requests is not blocked while the graph embeds and searches.
    # Cancelling the await does not cut a write short: the thread finishes the call, and what it
    # stored stays stored, as when a synchronous call returns. The threads are strata's own
    # (`_in_thread`), not the loop's default pool: a call waiting there for its namespace's gate
    # (memory/run_gate.py) took a worker that an async graph run holding the gate needed for its steps.
    # The same holds for an async app's *sync* graph nodes, which LangGraph runs in that default pool (a
    # handful of threads): a sync `add`, `undo`, `end_session`, `import_from` or refreshing question there
    # waits for the gate holding one, and with as many such nodes as threads, the strata run holding the
    # gate on the same loop never ends, nor do they. Call the async forms from async nodes instead.
    async def aadd(
        self, turns: TurnLike | Sequence[TurnLike], speaker: str = "user",
        on_turn: Callable[[int], None] | None = None, end_session: bool = False,
    ) -> IngestReport:
        """`add` for async apps."""
        return await _in_thread(self.add, turns, speaker, on_turn, end_session)

    async def aask(self, question: str, refresh: bool = False) -> Answer:
        """`ask` for async apps."""
        return await _in_thread(self.ask, question, refresh)

    async def aretrieve(self, question: str, refresh: bool = False) -> Answer:
        """`retrieve` for async apps."""
        return await _in_thread(self.retrieve, question, refresh)

    async def achat(self, text: str, speaker: str = "user") -> Answer:
        """`chat` for async apps."""
        return await _in_thread(self.chat, text, speaker)

    async def aerase(self, ids: Iterable[str] = (), about: str | None = None) -> ErasureReport:
        """`erase` for async apps."""
        return await _in_thread(self.erase, ids, about)

    async def aexport(self, about: str | None = None) -> MemoryDocument:
        """`export` for async apps."""
        return await _in_thread(self.export, about)

    async def aimport_from(
        self, document: MemoryDocument | dict[str, Any] | str | bytes | os.PathLike[str]
    ) -> ImportReport:
        """`import_from` for async apps."""
        return await _in_thread(self.import_from, document)

    async def aconsolidate(self, limit: int | None = None) -> ConsolidationReport:
        """`consolidate` for async apps (the slow path can take a while: this keeps the loop free)."""
        return await _in_thread(self.consolidate, limit)

    async def aundo(self, change_id: int | None = None) -> Change:
        """`undo` for async apps."""
        return await _in_thread(self.undo, change_id)

    async def aend_session(self) -> Record | None:
        """`end_session` for async apps."""
        return await _in_thread(self.end_session)

    # running -----------------------------------------------------------
    def _run(
        self, mode: str, payload: dict[str, Any], on_turn: Callable[[int], None] | None = None,
        overrides: dict[str, Any] | None = None, context: Context | None = None,
    ) -> dict[str, Any]:
        context = context or self.context(mode, **(overrides or {}))
        turns = payload.get("turns")
        config = run_config(context) | {"recursion_limit": step_limit(
            len(turns) if isinstance(turns, list) else 1, context.k_r)}
        if on_turn is None:
            return _plain(graph.invoke(payload, context=context, config=config))
        final: dict[str, Any] = {}
        chunks = graph.stream(payload, context=context, config=config, stream_mode=["updates", "values"])
        for chunk in chunks:
            kind, data = chunk
            if kind == "updates" and "memory" in data and (data["memory"] or {}).get("stage") in ("stored", "done"):
                on_turn(int(data["memory"]["cursor"]))
            elif kind == "values":
                final = data
        return _plain(final)


for _name in ("add", "end_session", "consolidate", "ask", "retrieve", "chat", "explain", "graph", "history", "undo",
              "get", "stats", "erase", "erase_as_planned", "erasure_plan", "export", "import_from", "drop"):
    setattr(Memory, _name, _said_in_one_line(getattr(Memory, _name)))


# The async calls' worker threads (see "the same calls for async apps" in `Memory`): apart from the loop's
# default pool, which an async graph run's steps use, so calls waiting for a namespace's gate never hold up
# the run they wait for. 32: more async calls at once than that wait their turn for a thread.
_CALLS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="strata-call")


async def _in_thread(call: Callable[..., _T], *args: Any) -> _T:
    """`asyncio.to_thread` on strata's own threads (`_CALLS`), the caller's context carried along."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_CALLS, functools.partial(context.run, call, *args))


def _plain(result: Any) -> dict[str, Any]:
    if isinstance(result, dict):
        return result
    return asdict(result)


def _names_a_record(value: str | None) -> str | None:
    if value is not None and not value.strip():  # an unset field of an app: it read the whole history
        raise ValueError("names no record: give a record's id (e.g. fact:D1:3:0), or None for every change")
    return value


class _HistoryQuery(BaseModel):
    """Arguments of `Memory.history`."""

    model_config = ConfigDict(strict=True)

    record_id: Annotated[str | None, AfterValidator(_names_a_record)] = Field(
        None, description="Only the changes of this record, e.g. fact:D1:3:0.")
    limit: int = Field(50, ge=1, le=LARGEST_INTEGER, description="At most this many changes.")


def _names_someone(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError("names nobody: give a participant's name, e.g. about='Caroline'")
    return value


_Participant = Annotated[str | None, AfterValidator(_names_someone)]


class _EraseRequest(BaseModel):
    """Arguments of `Memory.erase`."""

    model_config = ConfigDict(strict=True)

    ids: list[str] = Field(default_factory=list, description="Records to erase, e.g. raw:D1:3.")
    about: _Participant = Field(
        None, description="Erase every turn this participant said and every fact about them."
    )


class _ConsolidateRequest(BaseModel):
    """Arguments of `Memory.consolidate`."""

    model_config = ConfigDict(strict=True)

    limit: int | None = Field(None, ge=1, le=LARGEST_INTEGER, description="At most this many turns.")


class _ExportRequest(BaseModel):
    """Arguments of `Memory.export`."""

    model_config = ConfigDict(strict=True)

    about: _Participant = Field(None, description="Only what is said by or about this participant.")


class _UndoRequest(BaseModel):
    """Arguments of `Memory.undo`."""

    model_config = ConfigDict(strict=True)

    change_id: int | None = Field(None, ge=1, le=LARGEST_INTEGER,
                                  description="The change to reverse; the latest when None.")


class _Ids(BaseModel):
    """Arguments of `Memory.get`."""

    model_config = ConfigDict(strict=True)

    ids: list[str]


def _id_list(ids: object, call: str) -> list[object]:
    """Record ids as a list: a single string (or anything not iterable) is an `InputError`, not its letters."""
    if isinstance(ids, str | bytes | Mapping) or not isinstance(ids, Iterable):  # a dict's keys are no list
        raise InputError(f"{call} takes a list of record ids, not {type(ids).__name__}: e.g. ['raw:D1:3']")
    return list(ids)


def checked(model: type[_Arguments], /, **arguments: object) -> _Arguments:
    """The arguments as `model`, or an `InputError` of one line naming the first wrong one."""
    for name, value in arguments.items():
        for text in value if isinstance(value, list | tuple) else [value]:
            if isinstance(text, str):
                check_text(text, name)
    try:
        return model.model_validate(arguments)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "argument"
        problem = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise InputError(f"{where}: {problem} (got {shown_value(first.get('input'))})") from None


def _parsed(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError as error:
        raise InputError(f"the export is not JSON ({str(error)[:80]}): give what `export` wrote") from None
    except RecursionError:
        raise InputError("the export nests too deeply to be one: give what `export` wrote") from None


def _text(value: object, what: str) -> str:
    """Text as given, UTF-8 bytes decoded; anything else is an `InputError` (never its repr)."""
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{what} is bytes that are not UTF-8: decode it to text first") from None
    if not isinstance(value, str):
        raise InputError(f"{what} must be text, not {type(value).__name__}")
    return check_text(value, what)


def _flag(value: object, name: str) -> None:
    """A switch is True or False (numpy's too, and 0 or 1): "yes" must not pass for one (which way?)."""
    numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")
    if isinstance(value, bool) or numpy_bool or (isinstance(value, int) and value in (0, 1)):
        return
    raise InputError(f"{name} must be True or False, not {shown_value(value)}")


def _as_turns(turns: TurnLike | Sequence[TurnLike], speaker: str) -> list[Turn]:
    if isinstance(turns, bytes | bytearray):
        turns = _text(turns, "the turn")
    if isinstance(turns, str | dict | Turn):
        items: list[Any] = [turns]
    elif isinstance(turns, list | tuple):
        items = list(turns)
    else:
        raise InputError(
            f"turns must be a string, a {{'speaker', 'text'}} dict or a list of them, not {type(turns).__name__}"
        )
    items = [_text(item, f"turn {n}") if isinstance(item, bytes | bytearray) else item
             for n, item in enumerate(items, start=1)]
    batch = validate_turns(items, speaker)
    if not batch:
        raise InputError("no turns given: pass a string or a list of {'speaker', 'text'}")
    return batch


def _answer_from(question: str, result: dict[str, Any]) -> Answer:
    keys = set(Answer.model_fields) - {"question"}
    return Answer(question=question, **{k: v for k, v in result.items() if k in keys and v is not None})

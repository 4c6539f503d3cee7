"""The operator's routes, served beside the graph by a LangGraph server (`langgraph dev`, Platform).

A deployed memory is reached through graph runs (ingest, ask, chat, retrieve), but
what an operator does to a memory is not a run: look at its history, undo a change,
erase what a person asked to have removed, export its graph. langgraph.json mounts
this app (`http.app`), so those calls reach the memory the server's graph uses (its
STRATA_* settings), under `/strata/...`, with a namespace named by `?namespace=`:

    GET  /strata/stats          the record counts
    GET  /strata/records        ?ids=raw:D1:3&ids=...
    GET  /strata/history        ?record_id=...&limit=50
    POST /strata/undo           {"change_id": 12}  (the latest when null)
    POST /strata/erase          {"ids": [...]} or {"about": "Caroline"}; lists what would go
                                unless "confirm": true
    GET  /strata/graph          ?question=... or ?person=... (JSON)
    GET  /strata/export         the whole memory as one document, or ?about=<name>: that person's copy
    POST /strata/import         an export (the body) into this namespace, which must be empty
    POST /strata/consolidate    {"limit": null}

Every route needs `Authorization: Bearer <STRATA_ADMIN_TOKEN>`; a server without that
variable refuses them all, so mounting the app opens nothing by itself. A wrong request
gets a 4xx with one line (`{"error": ...}`), never a traceback, and changes nothing; a
full disk (the server's, or its ledger database's) a 507 with one line saying to free space,
after which the same call resumes.

An erase on a server also deletes the server's own threads whose saved states hold an
erased record (the in-process SDK client: `langgraph_sdk.get_client()`), as `Memory.erase`
does for the threads file of a data folder. An embedded Chroma folder keeps the erased rows'
bytes in free pages, and their vectors in its indexes, until it is rebuilt with the server
stopped (`strata erase`, or `compact_chroma` in memory/erasure.py).
"""

# No `from __future__ import annotations`: the server loads this file by its path, under a module name of
# its own, where pydantic could not resolve postponed annotations of the request bodies.
import asyncio
import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from strata.api import Memory, checked
from strata.checkpoint import run_namespaces, said_in
from strata.memory.erasure import Said
from strata.memory.errors import DiskFullError, InputError, NotFoundError, StrataError
from strata.memory.namespaces import check_namespace
from strata.memory.portability import read_document
from strata.thread_owners import Holders, holders_in

LOG = logging.getLogger(__name__)
TOKEN_VARIABLE = "STRATA_ADMIN_TOKEN"
THREADS_PAGE = 100  # threads read per call when an erase looks for those holding erased records
HISTORY_PAGE = 100  # saved states of one thread read per call
THREAD_READS = 8  # threads an erase reads at once (each read waits on the server: ~0.85 s on `langgraph dev`)

Handler = Callable[[Request, Memory], Awaitable[Any]]


class _UndoBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    change_id: Any = None


class _EraseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: Any = Field(default_factory=list)
    about: Any = None
    confirm: bool = Field(False, strict=True, description="true erases (JSON true only); without it, a listing")


class _ConsolidateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: Any = None


def route(handler: Handler, reads: bool = False) -> Callable[[Request], Awaitable[JSONResponse]]:
    """A handler behind the token check and the one-line errors, given the namespace's memory. A route that
    `reads` (or consolidates what is there) answers 404 for a namespace that holds nothing: a misspelt name
    gave zeros, and an export of it a backup that looked whole."""

    async def endpoint(request: Request) -> JSONResponse:
        refused = _refused(request)
        if refused is not None:
            return refused
        try:
            memory = Memory(_namespace(request))
            if reads and await asyncio.to_thread(_holds_nothing, memory):
                return _error(404, f"the namespace {memory.store.namespace!r} holds no memory: check its spelling")
            return JSONResponse(_plain(await handler(request, memory)))
        except NotFoundError as error:
            return _error(404, str(error))
        except InputError as error:
            return _error(400, str(error))
        except DiskFullError as error:  # the server's disk (or its database's): 507 Insufficient Storage
            return _error(507, str(error))
        except StrataError as error:
            return _error(503, str(error))
        except Exception as error:  # the server's log has the traceback; the caller gets one line
            LOG.exception("strata admin route %s failed", request.url.path)
            return _error(500, f"the memory could not do this ({type(error).__name__}); the server's log says why")

    return endpoint


def _holds_nothing(memory: Memory) -> bool:
    """No record of any kind or status, no history and no link: a namespace never written (or erased whole)."""
    counts = memory.stats()
    return not counts["history"] and not counts["links"] and not any(
        sum(by_status.values()) for kind, by_status in counts.items() if isinstance(by_status, dict)
        and kind != "links")


def _wrong_method(allowed: str) -> Callable[[Request], Awaitable[JSONResponse]]:
    """A route's other methods: 405 with the one-line error every route gives, not the server's bare 404."""

    async def endpoint(request: Request) -> JSONResponse:
        response = _error(405, f"{request.method} is not how to call {request.url.path}: use {allowed}")
        response.headers["Allow"] = allowed
        return response

    return endpoint


def _refused(request: Request) -> JSONResponse | None:
    token = os.environ.get(TOKEN_VARIABLE, "")
    if not token:
        return _error(403, f"the memory's admin routes are off: set {TOKEN_VARIABLE} on the server to use them")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        return _error(401, f"send the header 'Authorization: Bearer <{TOKEN_VARIABLE}>'")
    return None


def _namespace(request: Request) -> str:
    namespace = request.query_params.get("namespace", "").strip()
    if not namespace:
        raise InputError("name the memory: ?namespace=<namespace>")
    return namespace


async def _json(request: Request) -> object:
    """The body as JSON ({} when empty), or an `InputError` of one line."""
    raw = await request.body()
    try:
        return json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):  # RecursionError: nested deeper than any body of ours
        raise InputError("the body is not JSON: send a JSON object, e.g. {\"ids\": [\"raw:D1:3\"]}") from None


async def _body(request: Request, model: type[BaseModel]) -> Any:
    data = await _json(request)
    if not isinstance(data, dict):
        raise InputError(f"the body must be a JSON object, not {type(data).__name__}")
    return checked(model, **data)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


# the routes ---------------------------------------------------------------------------------------
async def stats(request: Request, memory: Memory) -> Any:
    return await asyncio.to_thread(memory.stats)


async def records(request: Request, memory: Memory) -> Any:
    return await asyncio.to_thread(memory.get, request.query_params.getlist("ids"))


async def history(request: Request, memory: Memory) -> Any:
    limit = request.query_params.get("limit", "50")
    try:
        count = int(limit)
    except ValueError:
        raise InputError(f"limit must be a whole number, got {limit[:20]!r}") from None
    return await asyncio.to_thread(memory.history, request.query_params.get("record_id"), count)


async def undo(request: Request, memory: Memory) -> Any:
    body = await _body(request, _UndoBody)
    return await memory.aundo(body.change_id)  # (strata's threads: it may wait for the namespace's gate)


async def consolidate(request: Request, memory: Memory) -> Any:
    body = await _body(request, _ConsolidateBody)
    return await memory.aconsolidate(body.limit)


async def graph(request: Request, memory: Memory) -> Any:
    params = request.query_params
    return await asyncio.to_thread(memory.graph, params.get("question"), params.get("person"))


async def export(request: Request, memory: Memory) -> Any:
    """The whole memory, or one person's copy (`?about=`), as `strata export` writes it."""
    return await memory.aexport(request.query_params.get("about"))


async def import_document(request: Request, memory: Memory) -> Any:
    """An export (the body) written into this namespace, which must be empty."""
    document = read_document(await _json(request))  # a document, never a path on the server
    return await memory.aimport_from(document)


async def erase(request: Request, memory: Memory) -> Any:
    """List what an erase would remove, server threads included; with "confirm": true, remove it."""
    body = await _body(request, _EraseBody)
    listed_at = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        plan = await asyncio.to_thread(memory.erasure_plan, body.ids, body.about)
    except InputError:
        if not body.confirm:
            raise
        # nothing left to erase: perhaps an erase stopped midway, sent again. `erase` finishes it first and
        # returns its report when it was this very request (its threads went before its records), or says what
        # it finished in one line
        gate = await asyncio.to_thread(memory.gate)
        async with gate.holding_async("close"):
            return (await asyncio.to_thread(memory.erase_as_planned, body.ids, body.about))[0]
    holders = holders_in(await asyncio.to_thread(lambda: memory.store.settings))
    threads, unknown = await server_threads_holding(set(plan.said), memory.store.namespace, holders)
    if not body.confirm:
        return {"erased": False, "would_erase": plan.targets, "would_delete_threads": threads,
                "would_keep_unattributed_threads": unknown, "would_erase_requests": [c.id for c in plan.requests],
                "hint": 'nothing was erased: send "confirm": true to erase them'}
    # no run of the namespace while its threads go, on this replica or another (a run saving its thread
    # meanwhile wrote the record back); runs sent meanwhile wait, and read the memory as the erase leaves it
    gate = await asyncio.to_thread(memory.gate)  # (it reads the folder's path: not on the loop)
    async with gate.holding_async("close"):
        return await _erase_confirmed(memory, body, (threads, unknown), listed_at)


async def _erase_confirmed(memory: Memory, body: _EraseBody, listed: tuple[list[str], list[str]],
                           listed_at: str) -> Any:
    """The erase itself, with the threads listed before it (and those kept as not known to be the
    namespace's), and any saved since."""
    threads, unknown = listed
    await asyncio.to_thread(memory.store.ledger.check_writable)  # a read-only memory: no thread is deleted
    deleted: list[str] = []
    await _delete_threads(threads, deleted)  # then the threads: one that cannot go stops the erase
    # planned again under the namespace's lock: a thread saved since the listing (a question shown a listed
    # record, a turn stored meanwhile) is looked for once more, now that nothing can add one
    report, erased = await asyncio.to_thread(memory.erase_as_planned, body.ids, body.about)
    report.threads_unattributed = sorted({*report.threads_unattributed, *unknown})
    try:  # (an old thread is told by the records it holds, which are gone now: those were told before)
        await _delete_threads((await server_threads_holding(set(erased.said), memory.store.namespace))[0], deleted)
    except Exception as error:  # the records are gone: say what may be left instead of failing the whole call
        report.threads = [*report.threads, *deleted]
        return {**report.model_dump(mode="json"), "threads_unchecked": (
            f"{type(error).__name__}: the records are erased, but the server's threads were not all searched "
            f"again: threads updated since {listed_at} may still hold them; delete those (LangGraph's threads API)")}
    report.threads = [*report.threads, *deleted]
    return report


async def server_threads_holding(said: set[Said], namespace: str,
                                 holders: Holders | None = None) -> tuple[list[str], list[str]]:
    """The server's threads any of whose saved states holds one of the (id, text) pairs `said` (as
    `strata.checkpoint.threads_to_erase` reads a data folder's threads file), and those it leaves because
    they say not whose they are: saved before runs recorded their namespace, they are the namespace's when
    the erased records they hold are no other namespace's (`holders`, strata/thread_owners.py). Only the
    namespace's threads are read: one whose runs all named other namespaces is left without reading its
    states (another namespace's 2,000-turn ingest made a one-record erase take minutes and gigabytes).
    Up to THREAD_READS threads are read at once: one by one, 82 threads took 94 s on `langgraph dev`."""
    from langgraph_sdk import get_client

    client = get_client()  # in process: the server this app is mounted in
    found: list[str] = []
    unknown: list[str] = []
    offset = 0
    reads = asyncio.Semaphore(THREAD_READS)

    async def holds(thread_id: str) -> bool | set[Said]:
        async with reads:
            return await _holds(client, thread_id, said, namespace)

    while said:
        page = await client.threads.search(limit=THREADS_PAGE, offset=offset, select=["thread_id"])
        ids = [thread["thread_id"] for thread in page]
        for thread_id, held in zip(ids, await asyncio.gather(*(holds(i) for i in ids)), strict=True):
            if held is True or (held and holders is not None and not (
                    await asyncio.to_thread(holders, held)) - {namespace}):  # `said` is the namespace's
                found.append(thread_id)
            elif held:
                unknown.append(thread_id)
        if len(page) < THREADS_PAGE:
            break
        offset += len(page)
    return found, unknown


async def _ran_elsewhere(client: Any, thread_id: str, namespace: str) -> bool:
    """Whether every run of the thread named a namespace (its context, or `configurable` from older clients,
    as the server records them), none is `namespace`, and no state came from a run not listed. A thread with
    no runs (its states written by another way), or a run naming none (the server's default), is not known
    to be another namespace's; nor is one whose runs do not account for its states (`_runs_account`)."""
    named: set[str] = set()
    run_ids: list[str] = []
    offset = 0
    while True:
        runs = await client.runs.list(thread_id, limit=HISTORY_PAGE, offset=offset, select=["run_id", "kwargs"])
        for run in runs:
            kwargs = run.get("kwargs") or {}
            given = [(kwargs.get(part) or {}) for part in ("context", "config")]
            name = given[0].get("namespace") or (given[1].get("configurable") or {}).get("namespace")
            try:
                named.add(check_namespace(name))
            except StrataError:  # none (the server's default) or one refused: not known to be another's
                return False
            run_ids.append(run["run_id"])
        if len(runs) < HISTORY_PAGE:
            break
        offset += len(runs)
    return bool(named) and namespace not in named and await _runs_account(client, thread_id, run_ids, named)


async def _runs_account(client: Any, thread_id: str, run_ids: list[str], named: set[str]) -> bool:
    """Whether the listed runs account for every state of the thread. A deleted run (the server deletes its
    states, or keeps them) leaves what it held in the first states of the run after it, which begin from
    its last state: an erase skipped such a thread, holding the erased words, since no run named the
    namespace. Each run's first state (its input's) carries the namespace of the state before it: one a
    listed run named, or none at the thread's very start; so must the thread's last state. The runs' first
    states are read together (the states a run's input saved, a page at a time, newest first), then the last:
    short reads, where reading the states of a long ingest took seconds, and one for all runs, where a read
    of each run's took ~0.85 s apiece on `langgraph dev`."""
    firsts: dict[str, Any] = {}  # run id -> its newest input state, as a read of that run's alone gave it
    before: Any = None
    while not set(run_ids) <= firsts.keys():
        states = await client.threads.get_history(thread_id, limit=HISTORY_PAGE, before=before,
                                                  metadata={"source": "input"})
        for state in states:
            firsts.setdefault((state.get("metadata") or {}).get("run_id"), state)
        if len(states) < HISTORY_PAGE:
            break
        before = {"configurable": states[-1]["checkpoint"]}
    for run_id in run_ids:
        first = firsts.get(run_id)
        if first is None:  # a run resumed, or one that never began: its states are not known from here
            return False
        carried = run_namespaces(first.get("values"))
        if carried - named or (not carried and first.get("parent_checkpoint")):
            return False
    last = await client.threads.get_history(thread_id, limit=1)
    return not (last and run_namespaces(last[0].get("values")) - named)


async def _holds(client: Any, thread_id: str, said: set[Said], namespace: str) -> bool | set[Said]:
    """Whether a thread's states hold one of `said` and were run on `namespace`; for a thread saved before
    runs recorded their namespace, the pairs of `said` it holds (whose it is, the caller tells: a thread of
    another namespace may hold a record of the same id and text). The states are read a page at a time and
    checked one by one, keeping only the namespaces seen and the pairs found: a long ingest's history held
    in memory whole took gigabytes."""
    from langgraph_sdk.errors import NotFoundError

    try:
        if await _ran_elsewhere(client, thread_id, namespace):
            return False
    except NotFoundError:  # deleted meanwhile (another erase): it holds nothing now
        return False
    held: set[Said] = set()
    spaces: set[str] = set()
    before: Any = None
    while True:
        try:
            states = await client.threads.get_history(thread_id, limit=HISTORY_PAGE, before=before)
        except NotFoundError:  # deleted meanwhile (another erase): it holds nothing now
            return False
        for state in states:
            values = state.get("values")
            spaces |= run_namespaces(values)
            held |= said & said_in(values)
            if held and namespace in spaces:
                return True
        if len(states) < HISTORY_PAGE:
            return held if held and not spaces else False
        before = {"configurable": states[-1]["checkpoint"]}  # the server reads `before` as a run's config


async def _delete_threads(threads: list[str], deleted: list[str]) -> None:
    """Delete the threads, adding each to `deleted` as it goes (so a failure midway leaves a true count);
    one already gone (another erase took it meanwhile) is not an error."""
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import NotFoundError

    client = get_client()
    for thread_id in threads:
        try:
            await client.threads.delete(thread_id)
        except NotFoundError:
            continue
        deleted.append(thread_id)


_ROUTES: list[tuple[str, Handler, str, bool]] = [  # path, handler, method, reads (404 for an empty namespace)
    ("/strata/stats", stats, "GET", True),
    ("/strata/records", records, "GET", True),
    ("/strata/history", history, "GET", True),
    ("/strata/undo", undo, "POST", False),
    ("/strata/erase", erase, "POST", False),
    ("/strata/graph", graph, "GET", True),
    ("/strata/export", export, "GET", True),
    ("/strata/import", import_document, "POST", False),
    ("/strata/consolidate", consolidate, "POST", True),  # nothing to consolidate: a misspelt name, as a read
]
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


async def _no_such_route(request: Request) -> JSONResponse:
    """A misspelt route (`/strata/histroy`) gets the one-line error every route gives, naming the routes, not
    the server's bare Not Found. (The server reads each route's docstring as YAML for its OpenAPI page, so
    no colon and space here, which it failed to parse and logged with a traceback at every start.)"""
    return _error(404, f"{request.url.path} is not a route of strata: use one of "
                       f"{', '.join(path for path, *_ in _ROUTES)}")


app = Starlette(routes=[
    *(Route(path, route(handler, reads), methods=[method]) for path, handler, method, reads in _ROUTES),
    *(Route(path, _wrong_method(method), methods=[m for m in _METHODS if m != method])
      for path, _, method, _ in _ROUTES),
    Route("/strata", _no_such_route, methods=_METHODS),
    Route("/strata/{rest:path}", _no_such_route, methods=_METHODS),  # after the routes: only what none matched
])

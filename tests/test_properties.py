"""Properties of the public surface: whatever a caller sends, the call works or fails in one line,
and the memory already stored is unchanged.

For any JSON value or Python object given as turns, question, namespace, setting,
record id, change id or command-line argument, `Memory` and the `strata` command
either work or raise the project's own error (a `StrataError`; exit code 2 and
one `strata: error:` line on the command line), and a populated namespace keeps
exactly its records, links and history (a fingerprint taken before and after).
Writes that could succeed go to a scratch namespace beside it, so a stored turn
is a success and never a change to the populated one; when such a write fails,
the scratch namespace is unchanged too.

Reproducible by default: the `ci` profile is derandomized. Set
`HYPOTHESIS_PROFILE=thorough` for ten times the examples with fresh randomness,
`quick` for a tenth while developing.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from strata.graph.context import Context
from strata.memory.errors import StrataError

from strata.api import Memory
from strata.cli import main

settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile("thorough", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("quick", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
SCALE = {"thorough": 10.0, "quick": 0.1}.get(os.environ.get("HYPOTHESIS_PROFILE", "ci"), 1.0)


def examples(n: int) -> int:
    """`n` examples under the default profile, scaled by the chosen one."""
    return max(3, int(n * SCALE))

# --- what a caller may send -------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
python_objects = st.one_of(
    st.binary(max_size=16), st.sets(st.integers(), max_size=3), st.tuples(st.integers(), st.text(max_size=5)),
    st.builds(object), st.datetimes(timezones=st.none() | st.timezones()), st.dates(), st.complex_numbers(),
    st.decimals(), st.fractions(), st.just(Ellipsis), st.just(Path("x")), st.just(int),
)
anything = json_values | python_objects
VOCABULARY = ("Where", "does", "Ann", "Bo", "live", "did", "adopt", "a", "puppy", "Rex", "when", "I", "we", "moved",
              "to", "Denver", "last", "week", "camping", "my", "kids", "forget", "?", ".", "!", "yesterday")


def mostly(likely: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`likely` three times in four, `other` otherwise (a plain `|` would weigh every leaf alike)."""
    return st.integers(0, 3).flatmap(lambda n: other if n == 0 else likely)


phrases = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=8).map(" ".join)
words = mostly(phrases, st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40))
texts = mostly(words, anything)
turn_fields = st.fixed_dictionaries(
    {"speaker": mostly(st.sampled_from(["Ann", "Bo", "user"]), texts), "text": texts},
    optional={"time": mostly(st.sampled_from(["2023-05-09T10:00:00Z", "2023-05-09T12:00:00+02:00", 1683626400,
                                              1683626400000, "10:00 am on 9 May, 2023"]), anything),
              "dia_id": texts, "session": anything, "listener": texts, "image_caption": texts},
)
turns = mostly(turn_fields | st.lists(turn_fields, min_size=1, max_size=3), anything | st.lists(anything, max_size=3))
# Every setting but those naming places or models (a random host or model name would reach for the network).
SETTINGS = sorted(
    set(Context.__dataclass_fields__) - {"mode", "namespace", "data_dir", "chroma_host", "chat_model", "base_url",
                                         "model", "embedder"}
)  # fmt: skip


# --- one populated namespace per module, and a fingerprint of it --------------------------------
@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("props") / "mem"


@pytest.fixture(scope="module")
def populated(folder: Path) -> Memory:
    memory = Memory("prop", data_dir=str(folder))
    memory.add([
        {"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1", "time": "2023-05-01T10:00:00Z"},
        {"speaker": "Bo", "text": "I adopted a puppy named Rex last week.", "dia_id": "D1:2",
         "time": "2023-05-01T10:01:00"},
        {"speaker": "Ann", "text": "I moved to Denver last month.", "dia_id": "D2:1", "time": 1685000000},
        {"speaker": "Bo", "text": "We went camping with my kids.", "dia_id": "D2:2", "time": "2023-05-25T09:00:00"},
    ], end_session=True)
    assert memory.history(), "the populated namespace needs some history to guard"
    return memory


@pytest.fixture(scope="module")
def scratch(folder: Path, populated: Memory) -> Memory:
    return Memory("scratch", data_dir=str(folder))


def fingerprint(memory: Memory) -> tuple[Any, ...]:
    """Every record (any status), every link and every change of the namespace."""
    store = memory.store
    records = sorted(
        (r.id, r.text, r.status.value, r.version, str(r.time)) for kind in ("raw", "fact", "episode", "persona")
        for r in store.all(kind, include_inactive=True)  # type: ignore[arg-type]
    )
    with store.ledger.reading() as session:  # every edge of the namespace, whatever it joins
        links = sorted(tuple(row) for row in session.execute(
            "SELECT src, dst, type, weight FROM links WHERE namespace = ?", (store.namespace,)).fetchall())
    history = [(c.id, c.action.value, c.record_id, c.undone) for c in store.history(limit=10_000)]
    working = [tuple(sorted(row.items())) for row in store.working()]
    return tuple(records), tuple(links), tuple(history), tuple(working)


def works_or_one_line(call: Any) -> Any:
    """The call's result, or None after checking it raised a StrataError of one line."""
    try:
        result = call()
    except StrataError as error:
        message = str(error)
        assert len(message.splitlines()) == 1 and "Traceback" not in message, repr(message)
        event(f"refused: {type(error).__name__}")
        return None
    event("works")
    return result


# --- the Python API ------------------------------------------------------------------------------
@settings(max_examples=examples(60))
@given(value=turns, speaker=mostly(st.just("user"), texts))
def test_add_any_value(populated: Memory, scratch: Memory, value: Any, speaker: Any) -> None:
    guarded, before = fingerprint(populated), fingerprint(scratch)
    result = works_or_one_line(lambda: scratch.add(value, speaker=speaker))
    if result is None:
        assert fingerprint(scratch) == before
    else:
        assert all(isinstance(i, str) for i in result.stored_ids)
        assert "b'" not in "".join(r.text for r in scratch.store.all("raw"))
    assert fingerprint(populated) == guarded


@settings(max_examples=examples(30))
@given(value=texts, speaker=mostly(st.just("Ann"), texts))
def test_chat_any_value(populated: Memory, scratch: Memory, value: Any, speaker: Any) -> None:
    guarded, before = fingerprint(populated), fingerprint(scratch)
    if works_or_one_line(lambda: scratch.chat(value, speaker=speaker)) is None:
        assert fingerprint(scratch) == before
    assert fingerprint(populated) == guarded


@settings(max_examples=examples(80))
@given(question=texts, retrieve=st.booleans())
def test_ask_and_retrieve_any_question(populated: Memory, question: Any, retrieve: bool) -> None:
    guarded = fingerprint(populated)
    answer = works_or_one_line(lambda: (populated.retrieve if retrieve else populated.ask)(question))
    assert answer is None or isinstance(answer.question, str)
    assert fingerprint(populated) == guarded


@settings(max_examples=examples(150))
@given(record_id=texts, limit=mostly(st.integers(-3, 100), anything), change_id=anything,
       ids=mostly(st.lists(texts | st.sampled_from(["raw:D1:1", "fact:D1:2:0"]), max_size=3), anything))
def test_history_undo_and_get_with_any_arguments(
    populated: Memory, record_id: Any, limit: Any, change_id: Any, ids: Any
) -> None:
    live = {c.id for c in populated.history(limit=10_000)}
    assume(change_id is not None and not (isinstance(change_id, int) and change_id in live))
    assume(not (isinstance(change_id, str) and change_id.strip().isdigit()))  # "3" may name a live change
    guarded = fingerprint(populated)
    works_or_one_line(lambda: populated.history(record_id, limit))
    works_or_one_line(lambda: populated.undo(change_id))
    works_or_one_line(lambda: populated.get(ids))
    assert fingerprint(populated) == guarded


@settings(max_examples=examples(100))
@given(ids=mostly(st.lists(texts | st.sampled_from(["raw:D1:1", "fact:D1:2:0"]), max_size=3), anything),
       about=mostly(texts | st.sampled_from(["Ann", "ann", " Ann "]), anything))
def test_erasure_listed_with_any_arguments_and_refused_without_a_real_target(
    populated: Memory, ids: Any, about: Any
) -> None:
    """Listing what an erase would take is a read; an erase naming an unknown record or nobody erases nothing."""
    guarded = fingerprint(populated)
    works_or_one_line(lambda: populated.erasure_plan(ids, about))
    assert fingerprint(populated) == guarded
    records = [r for kind in ("raw", "fact", "episode", "persona", "summary")
               for r in populated.store.all(kind, include_inactive=True)]  # type: ignore[arg-type]
    people = {name.lower() for r in records for name in (r.speaker, r.subject, r.participant) if name}
    live = {r.id for r in records}
    real_ids = isinstance(ids, list) and bool(ids) and all(isinstance(i, str) and i in live for i in ids)
    assume(not real_ids and not (isinstance(about, str) and about.strip().lower() in people))
    assert works_or_one_line(lambda: populated.erase(ids, about)) is None
    assert fingerprint(populated) == guarded


@settings(max_examples=examples(100))
@given(document=mostly(st.fixed_dictionaries({"format": st.just("strata-memory"), "version": st.just(1),
                                              "namespace": texts, "records": anything}), anything))
def test_import_with_any_document_into_a_full_namespace_changes_nothing(populated: Memory, document: Any) -> None:
    """Whatever is offered as an export, an import into a namespace that holds a memory refuses in one line."""
    guarded = fingerprint(populated)
    assert works_or_one_line(lambda: populated.import_from(document)) is None
    assert fingerprint(populated) == guarded


@settings(max_examples=examples(250))
@given(namespace=texts, name=st.sampled_from(SETTINGS), value=mostly(st.integers(-2, 70_000) | words, anything))
def test_constructor_with_any_namespace_or_setting(
    populated: Memory, folder: Path, namespace: Any, name: str, value: Any
) -> None:
    guarded = fingerprint(populated)
    memory = works_or_one_line(lambda: Memory(namespace, data_dir=str(folder)))
    if memory is not None:  # None names no namespace: STRATA_NAMESPACE's, then 'default'
        assert isinstance(memory.namespace, str) and memory.namespace == (namespace if namespace is not None
                                                                           else Context().namespace)
    configured = works_or_one_line(lambda: Memory("prop", data_dir=str(folder), **{name: value}))
    if configured is not None:
        context = configured.context("ask")
        assert type(getattr(context, name)) is type(getattr(Context(), name))
        works_or_one_line(configured.stats)
    assert fingerprint(populated) == guarded


# --- the command line ----------------------------------------------------------------------------
def run_cli(argv: list[str]) -> tuple[int, str]:
    """`strata ARGV` in this process: (exit code, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's own exits (usage errors, --help)
            code = stop.code if isinstance(stop.code, int) else 2
    return code, err.getvalue()


def _as_int(text: str) -> int | None:
    """What argparse's `type=int` makes of an argument ('3', ' +3', Arabic-Indic digits), or None."""
    try:
        return int(text)
    except ValueError:
        return None


cli_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)


@settings(max_examples=examples(60))
@given(
    command=st.sampled_from(["ask", "ask --retrieve-only", "stats", "history --limit", "undo", "history --record"]),
    namespace=st.none() | st.just("prop") | cli_text,
    argument=cli_text | st.integers(-5, 10**6).map(str),
    port=st.none() | cli_text | st.integers(-5, 10**6).map(str),
)
def test_cli_with_any_arguments(
    populated: Memory, folder: Path, command: str, namespace: str | None, argument: str, port: str | None
) -> None:
    assume(not (command == "undo" and _as_int(argument) in {c.id for c in populated.history(limit=10_000)}))
    argv = ["--data-dir", str(folder)]
    argv += [] if namespace is None else ["--namespace", namespace]
    argv += [] if port is None else ["--chroma-port", port]
    argv += [*command.split(), argument]
    guarded = fingerprint(populated)
    code, err = run_cli(argv)
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, (argv, err)
        assert lines[0].startswith("strata") and "error:" in lines[0], (argv, err)  # "strata history: error: ..."
    assert fingerprint(populated) == guarded


def test_the_fingerprint_sees_a_change(populated: Memory, scratch: Memory) -> None:
    """The guard is not vacuous: a real edit changes the fingerprint, and its undo restores it."""
    before = fingerprint(populated)
    fact = sorted(r.id for r in populated.store.all("fact"))[0]
    change = populated.store.delete(fact, reason="property guard check")
    assert fingerprint(populated) != before
    populated.undo(change.id)
    restored = [(r[0], r[1], r[2]) for r in fingerprint(populated)[0]]
    assert restored == [(r[0], r[1], r[2]) for r in before[0]], "undo restores the records (at a new version)"

"""The `strata` command: ingest conversations, ask, chat, inspect and undo changes, run the demo.

Each subcommand is a thin shell over `strata.api.Memory`, so it does what the
API, Studio and the server do. Every error a user can fix comes out as one line
`strata: error: ...` with exit code 2; writes happen per turn, so an interrupted
ingest keeps what it stored and the same command resumes it.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.resources import as_file
from pathlib import Path
from typing import Any, NoReturn

from strata.api import Answer, Memory
from strata.checkpoint import checkpoint_path, threads_to_drop, threads_to_erase
from strata.conversations import (
    ConversationFileError,
    LoadedConversation,
    Question,
    load_conversations,
    load_questions,
    load_turns,
)
from strata.demo import SAMPLE_CONVERSATION, run_demo
from strata.graph.state import check_speaker
from strata.ingestion import check_limits, ingest_conversation, select_sessions
from strata.memory.catalog import unknown_namespace
from strata.memory.erasure import compact_chroma
from strata.memory.errors import ConfigError, InputError, StrataError
from strata.memory.forgetting import shown_ids
from strata.memory.ledger_sql import LARGEST_INTEGER
from strata.memory.names import blank
from strata.memory.printable import printable, printable_json
from strata.memory.private_files import write_beside
from strata.memory.records import KINDS, Change
from strata.memory.registry import close_all
from strata.memory.store import DROPPING, IMPORTING, MemoryStore
from strata.thread_owners import holders_in, unattributed_line

PROG = "strata"
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: what a tool killed by a closed pipe exits with (`git log | head`)
# name on the command line -> Context field (the API validates the values)
SETTINGS = {
    "data_dir": "folder of the embedded Chroma store and the ledger (STRATA_DATA_DIR, default .strata)",
    "namespace": "whose memory: a user, an agent or a conversation id (STRATA_NAMESPACE, default 'default')",
    "model": "chat model as provider:model, e.g. openai:gpt-4o-mini; empty or 'offline' uses no model (STRATA_MODEL)",
    "base_url": "base URL of an OpenAI-compatible server (STRATA_BASE_URL)",
    "embedder": "local:all-MiniLM-L6-v2 (default, offline) or openai:<model> (STRATA_EMBEDDER)",
    "chroma_host": "Chroma server host; empty means embedded Chroma in --data-dir (STRATA_CHROMA_HOST)",
    "chroma_port": "Chroma server port (STRATA_CHROMA_PORT, default 8000)",
    "chroma_ssl": "true to reach the Chroma server over HTTPS (STRATA_CHROMA_SSL, default false)",
    "chroma_auth_header": "header the Chroma server checks, e.g. 'X-Chroma-Token: <token>'; never printed "
    "(STRATA_CHROMA_AUTH_HEADER, better: a command line is visible to other local users)",
    "ledger_url": "PostgreSQL URL of a ledger shared by replicas; empty means SQLite in --data-dir (STRATA_LEDGER_URL)",
    "owner": "who owns the memory: may ask to forget anyone's memories, not only their own (STRATA_OWNER)",
}

METAVARS = {"chroma_ssl": "true|false", "chroma_auth_header": "'NAME: VALUE'"}


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other error of the command."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {_one_line(message)} (see `{self.prog} --help`)\n")


def _count(text: str) -> int:
    """A count or a change id of the command line, from 1 to what the ledger holds, refused in the option's own
    words: the API's (`limit: Input should be ...`) reached the command line."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 1 <= value <= LARGEST_INTEGER:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {LARGEST_INTEGER}, got {text}")
    return value


def _settings_options(suppress: bool) -> argparse.ArgumentParser:
    """The memory settings, accepted before or after the subcommand."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("memory settings (unset ones come from STRATA_* variables, then defaults)")
    for name, help_text in SETTINGS.items():
        group.add_argument(
            f"--{name.replace('_', '-')}", dest=name, type=int if name == "chroma_port" else str,
            default=argparse.SUPPRESS if suppress else None, metavar=METAVARS.get(name, name.split("_")[-1].upper()),
            help=help_text,
        )
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, parents=[_settings_options(suppress=False)],
        description="Long-term memory for LLM agents: store conversations, then ask about them.",
        epilog="Start with `strata demo`. Every subcommand has its own --help. Exit codes: 0 done (a listing "
        "without --yes too), 2 a user error (one line), 130 interrupted, 141 the output's reader went away.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = [_settings_options(suppress=True)]

    def command(name: str, run: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=common, help=help_text, description=help_text)
        sub.set_defaults(run=run)
        return sub

    ingest = command("ingest", _ingest, "store a conversation file (LoCoMo, a list of LoCoMo samples, or a turn list)")
    ingest.add_argument("file", metavar="FILE", help="the conversation as JSON")
    ingest.add_argument("--limit-sessions", type=int, metavar="N", help="store only the first N sessions")
    ingest.add_argument("--json", action="store_true", help="print the summary as JSON")

    consolidate = command(
        "consolidate", _consolidate, "the slow path: causal links, denser entity links, topic and persona summaries"
    )
    consolidate.add_argument("--limit", type=_count, metavar="N", help="consolidate at most N turns in this run")
    consolidate.add_argument("--json", action="store_true", help="print the report as JSON")

    ask = command("ask", _ask, "answer a question from memory (the question is not stored)")
    ask.add_argument("question", metavar="QUESTION")
    ask.add_argument("--retrieve-only", action="store_true", help="return the validated evidence, no answer")
    ask.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    ask.add_argument(
        "--refresh", action="store_true",
        help="let a conflict the Judge finds change memory (default: report it, change nothing)",
    )

    explain = command("explain", _explain, "show how each item of a question's evidence was reached (no answer)")
    explain.add_argument("question", metavar="QUESTION")
    explain.add_argument("--json", action="store_true", help="print the evidence with its paths as JSON")

    graph_cmd = command("graph", _graph, "export the memory graph (or a question's or a person's part) as files")
    scope = graph_cmd.add_mutually_exclusive_group()
    scope.add_argument("--question", metavar="QUESTION", help="only the evidence of this question and its paths")
    scope.add_argument("--person", metavar="NAME", help="only what memory holds about this participant")
    graph_cmd.add_argument("--out", type=Path, default=Path("graph-export"), help="folder (default graph-export)")
    graph_cmd.add_argument("--formats", default="json,graphml,png",
                           help="some of json,graphml,png, comma-separated (default all)")

    chat = command("chat", _chat, "talk: every line you type is stored and answered (/quit or EOF ends)")
    chat.add_argument("--speaker", default="user", help="who is typing (default: user)")

    stats = command("stats", _stats, "records per store, links, history and working memory")
    stats.add_argument("--json", action="store_true", help="print the counts as JSON")

    history = command("history", _history, "changes made to memory, newest first")
    history.add_argument("--record", metavar="ID", help="only the changes of this record (e.g. fact:D1:3:0)")
    history.add_argument("--limit", type=_count, default=20, metavar="N", help="at most N changes (default 20)")

    undo = command("undo", _undo, "reverse a change (the latest update or delete when no id is given)")
    undo.add_argument("change_id", nargs="?", type=_count, metavar="CHANGE_ID")

    erase_cmd = command(
        "erase", _erase,
        "remove records for good with what was derived from them and their history (cannot be undone)",
    )
    erase_cmd.add_argument("ids", nargs="*", metavar="ID", help="records to erase (e.g. raw:D1:3)")
    erase_cmd.add_argument("--about", metavar="NAME", help="erase everything said by or about this participant")
    erase_cmd.add_argument("--yes", action="store_true",
                           help="erase; without it, only list what would go (exit 0, nothing changed)")
    erase_cmd.add_argument("--json", action="store_true", help="print the report (or the listing) as JSON")

    drop_cmd = command(
        "drop", _drop,
        "delete the namespace's whole memory: records, links, history, working memory (cannot be undone)",
    )
    drop_cmd.add_argument("--yes", action="store_true",
                          help="drop it; without it, only say what would go (exit 0, nothing changed)")
    drop_cmd.add_argument(
        "--records-elsewhere", action="store_true",
        help="drop the ledger's half of a namespace whose records are not in this Chroma (the ledger says they "
             "were written through another one, or cannot say): only when they are lost for good",
    )

    export_cmd = command("export", _export, "write the namespace's whole memory as one JSON file (a backup, a move)")
    export_cmd.add_argument(
        "--out", type=str, required=True, metavar="FILE",  # text: Path("./-") would read as "-"
        help="the file to write (through a link, to the file it names), or - for stdout (./- for a file named -)",
    )
    export_cmd.add_argument("--about", metavar="NAME",
                            help="only what is said by or about this participant (their copy; not importable)")

    import_cmd = command("import", _import, "write an export into this namespace, which must be empty")
    import_cmd.add_argument("file", metavar="FILE", help="a file `strata export` wrote")

    reindex = command(
        "reindex", _reindex,
        "rebuild an embedded Chroma folder's vector indexes from what they hold (a stopped server's folder "
        "after an erase; `erase` does it itself for an embedded memory)",
    )
    reindex.add_argument("folder", type=Path, metavar="FOLDER",
                         help="the Chroma folder: <data_dir>/chroma, or a stopped `chroma run --path` folder")

    demo = command("demo", _demo, "ingest a conversation and answer some of its gold questions, offline")
    demo.add_argument(
        "--file", type=Path, help="a LoCoMo conversation with 'qa' (default: the shipped sample conversation)"
    )
    demo.add_argument("--questions", type=int, default=5, metavar="N", help="how many gold questions (default 5)")
    return parser


# --- helpers ---------------------------------------------------------------------------------


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line; the rest come from STRATA_* variables and defaults."""
    given = {name: getattr(args, name, None) for name in SETTINGS if name != "namespace"}
    return {name: value for name, value in given.items() if value is not None}


def _memory(args: argparse.Namespace, namespace: str | None = None, **overrides: Any) -> Memory:
    """The memory the options name; an empty --namespace is refused, never read as the default one."""
    chosen = namespace if namespace is not None else args.namespace
    if chosen is None:
        return Memory(**{**_settings(args), **overrides})  # STRATA_NAMESPACE, then 'default'
    return Memory(chosen, **{**_settings(args), **overrides})


def _stored_memory(args: argparse.Namespace) -> Memory:
    """The memory of a command that reads or changes what is stored (every one but ingest, chat and import), in
    a folder that holds a memory (`_stored_folder`), of a namespace that exists there: a misspelt --namespace
    read as an empty memory, and `export` wrote an empty backup and exited 0 (memory/catalog.py)."""
    memory = _stored_folder(args)
    store = memory.store
    if not store.exists():
        raise InputError(f"{unknown_namespace(store)}: check --namespace (and --data-dir), or store a conversation "
                         "in it first (`strata ingest FILE`, `strata chat` or `strata import FILE`); nothing was "
                         "created")
    return memory


def _stored_folder(args: argparse.Namespace) -> Memory:
    """The memory the options name, in a folder that holds a memory: opening a memory creates its folder and
    files, so a mistyped --data-dir, read, left an empty memory behind and printed zeros. A folder holding
    none of a memory's files is one line; nothing is created."""
    memory = _memory(args)
    settings = memory.context("ask").store_settings()
    kept_here = [path for path, local in ((settings.ledger_path, not settings.ledger_url),
                                          (settings.chroma_path, not settings.chroma_host)) if local]
    if not kept_here:  # both halves on servers: nothing on this disk to look at
        return memory
    folder = kept_here[0].parent
    try:
        if folder.exists() and not folder.is_dir():
            return memory  # opening it says, in one line, that a file is in the way
        if any(path.exists() for path in kept_here):
            return memory
        why = "a folder holding no memory" if folder.exists() else "no such folder"
    except OSError:  # a name the file system cannot hold: opening says so in one line
        return memory
    raise InputError(f"{folder} holds no memories yet ({why}): check --data-dir, or store a conversation first "
                     "(`strata ingest FILE`, `strata chat` or `strata import FILE`); nothing was created")


def _where(memory: Memory) -> str:
    context = memory.context("ask")
    place = f"{context.chroma_host}:{context.chroma_port}" if context.chroma_host else context.data_dir
    return f"namespace {context.namespace!r} in {place}"


@contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[], None]]:
    """A per-turn progress bar on a terminal (silent when stderr is not one)."""
    from tqdm import tqdm

    with tqdm(total=total, desc=label, unit="turn", file=sys.stderr, disable=None, leave=False) as bar:
        yield lambda: bar.update(1)


def _require_memories(memory: Memory) -> None:
    memory.store.check_whole()  # an unfinished import is said as such, not as an empty memory to ingest into
    if memory.store.count("raw") == 0:
        raise InputError(
            f"{_where(memory)} holds no memories yet: store a conversation first (`strata ingest FILE`) "
            "or check --data-dir and --namespace"
        )


def _print_answer(answer: Answer) -> None:
    if answer.answer is not None:
        _show(f"answer: {answer.answer}")
    else:
        _show("answer: (retrieval only)")
    _show(f"cited: {', '.join(answer.cited_ids) or '(none)'}")
    _show(f"evidence ids: {', '.join(answer.evidence_ids()) or '(none)'}")
    for item in answer.evidence:
        _show(f"  {item.id:<18} {item.label or item.text}")
    if answer.verdict is not None:
        _show(f"judge: {answer.verdict.action} after {answer.rounds} round(s) ({answer.verdict.policy})")
    for note in answer.changes:
        _show(f"changed: {note.action} {note.record_id} (undo with `strata undo {note.change_id}`)")


def _print_change(change: Change) -> None:
    when = change.time.strftime("%Y-%m-%d %H:%M:%S")
    state = " [undone]" if change.undone else ""
    parts = [f"#{change.id}", when, change.action.value, change.record_id]
    if change.old_status != change.new_status:
        parts.append(f"status {change.old_status.value} -> {change.new_status.value}")
    if change.old_text != change.new_text:
        parts.append(f"{_short(change.old_text)!r} -> {_short(change.new_text)!r}")
    parts += _field_changes(change)
    parts.append(f"({change.reason}, {change.policy}){state}")
    _show(" ".join(parts))


def _field_changes(change: Change) -> list[str]:
    """What an edit changed besides the words: an evolution's tags and context, an update's subject, attribute
    or value ('context "..." -> "..."')."""
    return [f"{name} {_short(change.old_fields.get(name, ''))!r} -> {_short(value)!r}"
            for name, value in change.new_fields.items() if change.old_fields.get(name, "") != value]


def _short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


# --- commands --------------------------------------------------------------------------------


def _ingest(args: argparse.Namespace) -> int:
    conversations = load_conversations(args.file)  # validates the whole file before anything is written
    select_sessions(conversations[0], args.limit_sessions)  # a bad --limit-sessions fails before writing
    base = _memory(args).context("ingest").namespace
    # a benchmark file holds several conversations: each gets its own namespace under the given one,
    # all checked before anything is written
    memories = [
        _memory(args, base if len(conversations) == 1 else f"{base}/{conversation.conversation_id}")
        for conversation in conversations
    ]
    for conversation, memory in zip(conversations, memories, strict=True):
        sample = f", sample {conversation.conversation_id!r}" if len(conversations) > 1 else ""
        check_limits(memory, conversation, args.limit_sessions, f"{args.file}{sample}")
    summaries = []
    for conversation, memory in zip(conversations, memories, strict=True):
        total = sum(len(s.turns) for s in select_sessions(conversation, args.limit_sessions))
        with _progress(total, conversation.conversation_id) as tick:
            summary = ingest_conversation(memory, conversation, args.limit_sessions, on_turn=tick)
        summaries.append(summary)
        if not args.json:
            _show(summary.line())
    if args.json:
        data = [s.model_dump(mode="json") for s in summaries]
        _show_json(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    return 0


def _ask(args: argparse.Namespace) -> int:
    if blank(args.question):
        raise InputError('the question is empty: ask something, e.g. strata ask "Where does Ann live?"')
    memory = _stored_memory(args)
    _require_memories(memory)
    read = memory.retrieve if args.retrieve_only else memory.ask
    answer = read(args.question, refresh=args.refresh)
    if args.json:
        _show_json(answer.model_dump_json(indent=2))
    else:
        _print_answer(answer)
    return 0


def _explain(args: argparse.Namespace) -> int:
    if blank(args.question):
        raise InputError('the question is empty: e.g. strata explain "Where does Ann live?"')
    memory = _stored_memory(args)
    _require_memories(memory)
    answer = memory.explain(args.question)
    if args.json:
        _show_json(answer.model_dump_json(indent=2, include={"question", "evidence", "trace", "notes"}))
    else:
        _show(answer.explain())
    return 0


def _graph(args: argparse.Namespace) -> int:
    from strata.memory.graph.export import FORMATS, check_formats, write_graph

    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not formats:  # it wrote nothing and said so with exit 0
        raise InputError(f"--formats names no format: use some of {','.join(FORMATS)}")
    check_formats(formats)  # before the graph is worked out, not after
    if args.question is not None and blank(args.question):
        raise InputError('the question is empty: e.g. strata graph --question "Where does Ann live?", or leave '
                         "--question out for the whole graph")
    memory = _stored_memory(args)
    _require_memories(memory)
    exported = memory.graph(question=args.question, person=args.person)
    stem = "question" if args.question else f"person-{args.person.lower()}" if args.person else "namespace"
    out = _outside_memory(args.out.expanduser(), memory)
    if out.is_file():
        raise InputError(f"--out {out} is a file: name the folder to write the graph's files in")
    notes: list[str] = []
    try:
        written = write_graph(exported, out, stem, formats, notes)
    except OSError as error:
        raise ConfigError(f"cannot write in {out} ({error.strerror or type(error).__name__}): choose a writable "
                          "folder") from None
    for path in written:
        _show(f"wrote {path}")
    _show(f"{len(exported.nodes)} nodes, {len(exported.edges)} edges ({exported.scope})")
    for note in notes:
        _show(f"{PROG}: note: {note}", file=sys.stderr)
    return 0


def _chat(args: argparse.Namespace) -> int:
    if sys.stdin is None:  # `strata chat <&-`: Python gives no stream at all
        raise InputError("stdin is closed: type the lines, or send them in (strata chat < lines.txt)")
    check_speaker(args.speaker, "--speaker")  # before anything is read: every line was refused for it, and the
    # chat went on
    memory = _memory(args)
    interactive = sys.stdin.isatty()
    answered = refused = 0
    if interactive:
        _show(f"chatting as {args.speaker!r} with {_where(memory)}; /quit or Ctrl-D ends", file=sys.stderr)
    while True:
        if interactive:
            _show(f"{args.speaker}> ", end="", flush=True, file=sys.stderr)
        line = sys.stdin.readline()
        if not line:
            break
        text = line.strip()
        if text in ("/quit", "/exit"):
            break
        if not text:
            continue
        try:
            answer = memory.chat(text, speaker=args.speaker)
        except InputError as error:  # one bad line does not end the conversation
            _show(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
            refused += 1
            continue
        answered += 1
        _show(answer.answer or "(no answer)")
        if answer.cited_ids:
            _show(f"  cited: {', '.join(answer.cited_ids)}")
        sys.stdout.flush()
    return EXIT_USER_ERROR if refused and not answered else 0  # every line refused: a script sees it failed


def _stats(args: argparse.Namespace) -> int:
    memory = _stored_memory(args)
    counts = memory.stats()
    if args.json:
        _show_json(json.dumps(counts, indent=2, default=str))
        return 0
    _show(_where(memory))
    _show(f"{'store':<10}{'active':>8}{'superseded':>12}{'deleted':>9}")
    for kind in KINDS:
        row = counts.get(kind, {})
        _show(f"{kind:<10}{row.get('active', 0):>8}{row.get('superseded', 0):>12}{row.get('deleted', 0):>9}")
    links = counts.get("links", 0)
    if isinstance(links, dict):
        detail = ", ".join(f"{name} {count}" for name, count in sorted(links.items()))
        _show(f"links: {sum(links.values())}" + (f" ({detail})" if detail else ""))
    else:
        _show(f"links: {links}")
    _show(f"history: {counts.get('history', 0)} changes")
    _show(f"working memory: {counts.get('working', 0)} turns")
    return 0


def _consolidate(args: argparse.Namespace) -> int:
    memory = _stored_memory(args)
    report = memory.consolidate(args.limit)
    if args.json:
        _show_json(report.model_dump_json(indent=2))
        return 0
    _show(
        f"consolidated {report.turns} turns of {_where(memory)} in {report.seconds:.1f} s "
        f"({report.per_thousand_turns():.1f} s per 1,000 turns; policy {report.policy})"
    )
    _show(f"new links: causal {report.causal}, entity {report.entity}; "
          f"summaries written {report.summaries}, unchanged {report.summaries_unchanged}")
    if report.filed:
        _show(f"first filed as notes: {report.filed} turns an earlier version stored without one")
    return 0


def _history(args: argparse.Namespace) -> int:
    if args.record is not None and not args.record.strip():  # it listed the whole history
        raise InputError("--record is empty: give a record's id (e.g. fact:D1:3:0), or leave --record out for "
                         "every change")
    memory = _stored_memory(args)
    changes = memory.history(args.record, args.limit)
    if not changes:
        subject = f"record {args.record!r} (it is as it was stored)" if args.record else _where(memory)
        _show(f"no changes for {subject}")
    for change in changes:
        _print_change(change)
    return 0


def _undo(args: argparse.Namespace) -> int:
    memory = _stored_memory(args)
    change = memory.undo(args.change_id)
    _show(f"undid change #{change.undoes} on {change.record_id}: it is {change.new_status.value} again")
    _show(f"text now: {change.new_text}")
    for restored in _field_changes(change):  # an evolution's undo gives back tags and context, not words
        _show(f"restored {restored}")
    _show(f"(this undo is change #{change.id}; `strata undo {change.id}` does not redo: edit again instead)")
    settled = [c for c in memory.history(change.record_id, limit=5) if (c.id or 0) > (change.id or 0)]
    for later in reversed(settled):  # its slot had a newer value since: memory/slots.py `undo`
        _show(f"then change #{later.id}: {later.record_id} is {later.new_status.value}, {later.reason} "
              f"(`strata undo {later.id}` makes it {later.old_status.value} again)")
    return 0


def _erase(args: argparse.Namespace) -> int:
    if not args.ids and not args.about:
        raise InputError("name the records to erase (e.g. strata erase raw:D1:3) or a participant (--about NAME)")
    memory = _stored_memory(args)
    if not args.yes:  # the listing asked for: a success (it exited 1, which no help mentioned)
        plan = memory.erasure_plan(args.ids, args.about)
        store = memory.store
        chosen = threads_to_erase(memory.context("ask").data_dir, plan.said, store.namespace,
                                  holders_in(store.settings))
        threads = list(chosen.threads)
        if args.json:
            requests = [c.id for c in plan.requests]
            _show_json(json.dumps({"erased": False, "targets": plan.targets, "requests": requests, "threads": threads,
                                   "threads_unattributed": chosen.unattributed}, indent=2))
            return 0
        _show(f"would erase {len(plan.targets)} records for good (with their links and history): "
              f"{', '.join(plan.targets)}")
        if plan.requests:  # the turn stays, told without its words; the rows holding them go
            _show(f"and the words of the requests to forget them, kept in {len(plan.requests)} history rows: "
                  f"{', '.join(f'#{c.id} ({c.record_id})' for c in plan.requests)} (each request's turn stays, "
                  "told without them)")
        if threads:
            _show(f"and delete {len(threads)} saved threads that hold them: {shown_ids(threads)}")
        if chosen.unattributed:
            _show(f"and keep {len(chosen.unattributed)} saved threads that hold them but say not whose they are: "
                  f"{shown_ids(chosen.unattributed)}")
        _show("nothing was erased: run again with --yes to erase them")
        return 0
    report = memory.erase(args.ids, args.about)
    compacted = _closed_and_compacted(memory)
    if args.json:
        _show_json(json.dumps({**report.model_dump(mode="json"), "chroma_compacted": compacted}, indent=2))
        return 0
    _show(report.summary())
    _say_compacted(compacted, "erased")
    return 0


def _closed_and_compacted(memory: Memory) -> bool | None:
    """Close the memory and rebuild its embedded Chroma folder (`compact_chroma`), so what was removed leaves
    Chroma's files too: None on a Chroma server, which is not rebuilt from here."""
    settings = memory.context("ask").store_settings()
    close_all()  # the embedded Chroma file can be rebuilt only with no client open on it
    return None if settings.chroma_host else compact_chroma(settings.chroma_path)


def _say_compacted(compacted: bool | None, removed: str) -> None:
    if compacted is not None:
        _show(f"Chroma's database and indexes rebuilt without the {removed} records' bytes and vectors" if compacted
              else "Chroma's files were not rebuilt: with the memory closed, run "
              "strata.memory.erasure.compact_chroma(Path(data_dir) / 'chroma') from Python")


def _held(store: MemoryStore) -> dict[str, int]:
    """What a namespace holds, read as it is: an unfinished import or a Chroma half gone missing (the states
    whose one-line errors say to drop it) included, which every `Memory` call refuses to read."""
    ledger, namespace = store.ledger, store.namespace
    return {"records": sum(store.count(kind) for kind in KINDS), "links": sum(ledger.count_links(namespace).values()),
            "history entries": ledger.count_history(namespace), "working-memory turns": len(ledger.working(namespace))}


def _drop(args: argparse.Namespace) -> int:
    """`Memory.drop()`: the way out that several errors name, which the command line lacked."""
    memory = _stored_memory(args)
    store = memory.store
    refusal = store.drop_refusal()
    if refusal is not None and not args.records_elsewhere:  # said before the listing too: it counted 0 records
        raise ConfigError(refusal)
    held = ", ".join(f"{count} {what}" for what, count in _held(store).items())
    unfinished = " (an import of it had not finished)" if store.state(IMPORTING) is not None else (
        " (a drop of it had stopped midway)" if store.state(DROPPING) is not None else "")
    if refusal is not None:
        unfinished += " (its records are not in this Chroma, and stay wherever they are)"
    if not args.yes:
        _show(f"would drop {_where(memory)} for good: {held}{unfinished}")
        chosen = threads_to_drop(memory.context("ask").data_dir, store.namespace, holders_in(store.settings))
        threads = chosen.threads
        if threads:
            _show(f"and delete {len(threads)} saved threads run on it: {shown_ids(list(threads))}")
            shared = {thread: others for thread, others in threads.items() if others}
            if shared:
                others = sorted({name for names in shared.values() for name in names})
                _show(f"{len(shared)} of them also ran on other namespaces ({', '.join(others)}), whose runs on "
                      f"them go too (their memories stay): {shown_ids(list(shared))}")
        if chosen.unattributed:
            _show(unattributed_line(chosen.unattributed, shown_ids))
        _show("nothing was deleted: run again with --yes to drop it")
        return 0
    threads = memory.drop(records_elsewhere=args.records_elsewhere)
    compacted = _closed_and_compacted(memory)  # as after `erase --yes`: Chroma's free pages held the dropped words
    deleted = f"; {len(threads)} saved threads deleted ({shown_ids(threads)})" if threads else ""
    _show(f"dropped {_where(memory)}: {held}{unfinished}{deleted}; the namespace is empty and can be used again")
    if threads.unattributed:
        _show(unattributed_line(threads.unattributed, shown_ids))
    _say_compacted(compacted, "dropped")
    return 0


def _outside_memory(out: Path, memory: Memory) -> Path:
    """`out` itself, unless writing there would replace one of the memory's own files (the ledger, Chroma's
    folder and lock, the saved threads, or their journals): then one line, before anything is written."""
    context = memory.context("ask")
    settings = context.store_settings()
    databases = [settings.ledger_path, checkpoint_path(context.data_dir)]
    own = [*databases, *(p.with_name(p.name + end) for p in databases for end in ("-wal", "-shm", "-journal")),
           settings.chroma_path.with_name("chroma.lock")]
    target = _resolved(out)
    chroma = settings.chroma_path.resolve()
    if target.is_relative_to(chroma) or target in {p.resolve() for p in own}:
        name = "chroma" if target.is_relative_to(chroma) else target.name
        raise InputError(f"--out {out} would replace the memory's own {name}: write it somewhere else")
    return out


def _resolved(out: Path) -> Path:
    """`out` with its links followed (not strict: a link to a file not yet there names where to write)."""
    try:
        return out.resolve()
    except (OSError, RuntimeError) as error:  # a loop of links (RuntimeError before Python 3.13)
        raise InputError(f"--out {out} is a link that leads nowhere ({_one_line(error)}): name a file or "
                         "folder") from None


def _export_target(out: Path) -> tuple[Path, int | None]:
    """The file `--out` names, links followed, and its permission bits when it exists. The file is written
    beside that target and renamed over it: renamed over the path as given, a link became a file and the
    file it named kept the old export; a pipe or a device (/dev/stdout, /dev/full) was replaced by a file."""
    target = _resolved(out)
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target, None
    except OSError as error:
        raise ConfigError(f"cannot use --out {out} ({error.strerror or type(error).__name__}): choose a writable "
                          "path") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"--out {out} is a folder: name the file to write, e.g. {out / 'memory.json'}")
    if not stat.S_ISREG(mode):
        raise InputError(f"--out {out} is not a regular file (a pipe, a device or a socket): name a file, or give "
                         "--out - to write to stdout; nothing was written")
    return target, stat.S_IMODE(mode)


def _write_beside(target: Path, text: str, mode: int | None) -> None:
    """`text` into `target`, written beside it and renamed over it: a failed write leaves an earlier file
    whole. The partial file is created afresh (never written through whatever holds its name) and keeps
    the permissions the replaced file had; a new one is private to the user (0600), as the memory it holds
    is (it was 0644 under the usual umask)."""
    def write(partial: Path) -> None:
        with partial.open("w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())  # a backup that a crash right after the rename empties is no backup

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_beside(target, write, mode)
    except OSError as error:
        raise ConfigError(f"cannot write {target} ({error.strerror or type(error).__name__}): choose a writable "
                          "path") from None


def _export(args: argparse.Namespace) -> int:
    if not args.out.strip():  # Path("") is the current folder: it said '--out . is a folder'
        raise InputError("--out is empty: name the file to write, e.g. --out memory.json, or give --out - for stdout")
    to_stdout = args.out == "-"  # it wrote a file named '-'
    if to_stdout and sys.stdout is None:
        raise InputError("stdout is closed: give --out FILE")
    memory = _stored_memory(args)
    if to_stdout:
        document = memory.export(args.about)
        sys.stdout.write(printable_json(document.model_dump_json()) + "\n")  # the same document, parsed
        sys.stdout.flush()
        shown, report = "stdout", sys.stderr  # stdout holds the document alone
    else:
        out = _outside_memory(Path(args.out).expanduser(), memory)
        target, mode = _export_target(out)
        document = memory.export(args.about)
        _write_beside(target, document.model_dump_json(), mode)
        shown, report = (f"{out} (-> {target})" if target != out.absolute() else str(out)), sys.stdout
    whose = f"{args.about}'s records" if args.about else "the memory"
    _show(f"wrote {whose} of {_where(memory)} to {shown}: {len(document.records)} records, {len(document.links)} "
          f"links, {len(document.history)} history entries", file=report)
    return 0


def _import(args: argparse.Namespace) -> int:
    memory = _memory(args)
    try:
        report = memory.import_from(Path(args.file))  # a path always: '[2024-05-01] backup.json' read as JSON
    except KeyboardInterrupt:  # import_memory dropped what it wrote: nothing of it is stored
        _show(f"\n{PROG}: interrupted: the import was rolled back and nothing was imported; run the same command "
              "to import it", file=sys.stderr)
        return EXIT_INTERRUPTED
    _show(f"{report.summary()} into {_where(memory)}")
    return 0


def _reindex(args: argparse.Namespace) -> int:
    from strata.memory.locks import hold_folder, release_folder
    from strata.memory.reindex import rebuild_folder, require_chroma

    folder = args.folder.expanduser().resolve()
    require_chroma(folder)
    if not os.access(folder, os.W_OK) or not os.access(folder / "chroma.sqlite3", os.W_OK):
        raise ConfigError(f"{folder} is read-only here: a rebuild rewrites it; run it where the folder is writable")
    hold_folder(folder)  # no strata process of this machine may have it open meanwhile
    try:
        copied = rebuild_folder(folder)
    finally:
        release_folder(folder)
    _show(f"rebuilt {len(copied)} collections ({sum(copied.values())} records) in {folder}; "
          f"then run `chroma vacuum --path {folder}` to drop the database's freed pages")
    return 0


def _demo(args: argparse.Namespace) -> int:
    if args.questions < 0:
        raise InputError(f"--questions must be 0 or more, got {args.questions}")
    if args.file is not None:
        return _demo_on(args, args.file)
    if not SAMPLE_CONVERSATION.is_file():  # package data left out of a hand-made copy
        raise ConfigError("the sample conversation is not installed with this copy: pass --file CONVERSATION.json")
    with as_file(SAMPLE_CONVERSATION) as sample:  # a file path, also from a zipped install
        return _demo_on(args, sample)


def _demo_on(args: argparse.Namespace, file: Path) -> int:
    conversation: LoadedConversation = load_turns(file)
    # read separately and only for scoring: the memory never sees the gold questions
    questions = load_questions(file)
    # offline unless a model is named on the command line (STRATA_MODEL does not switch the demo online)
    overrides = {"model": args.model or "offline"}
    namespace = "demo" if args.namespace is None else args.namespace
    _show(f"demo: {file} ({conversation.turn_count()} turns in {len(conversation.sessions)} sessions, "
          f"{len(questions)} gold questions), model: {overrides['model']}")
    if args.data_dir:
        return _run_demo(args, _memory(args, namespace, **overrides), conversation, questions)
    with tempfile.TemporaryDirectory(prefix="strata-demo-") as folder:
        try:
            return _run_demo(args, _memory(args, namespace, **overrides, data_dir=folder), conversation, questions,
                             temporary=True)
        finally:
            close_all()  # release the ledger before the folder is removed


def _run_demo(
    args: argparse.Namespace, memory: Memory, conversation: LoadedConversation, questions: list[Question],
    temporary: bool = False,
) -> int:
    # a temporary folder's name would lead a user nowhere once the demo ends: say so instead
    place = (f"namespace {memory.namespace!r} in a temporary folder, deleted when the demo ends (--data-dir DIR "
             "keeps it)") if temporary else _where(memory)
    _show(f"memory: {place}")
    with _progress(conversation.turn_count(), "ingest") as tick:
        run_demo(memory, conversation, questions, args.questions, print, on_turn=tick)
    return 0


# --- entry point -----------------------------------------------------------------------------


def _show(text: object = "", **how: Any) -> None:
    """Print a line of output. Everything the commands print passes here or through `_show_json`: it may hold
    stored text (a turn, an answer, a reason, an id), and a turn holding `ESC [2J` or `ESC ]0;...BEL` cleared the
    screen or retitled the window of whoever ran `ask`, `explain` or `history`. Control characters are shown
    as escapes (`printable`); what memory holds is unchanged."""
    print(printable(str(text)), **how)


def _show_json(text: str, **how: Any) -> None:
    """Print JSON with the characters `_show` escapes written as JSON escapes: the same document once parsed."""
    print(printable_json(text), **how)


def _one_line(error: BaseException | str) -> str:
    """The message on one line: any run of whitespace or line separator (a user's value may hold
    them) becomes one space."""
    return " ".join(str(error).split()) or type(error).__name__


def _printable_streams() -> None:
    """A console or file that is not UTF-8 (cp1252 on Windows) gets what it cannot show as escapes (\\u674e),
    instead of a UnicodeEncodeError that ends the command halfway through its output."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a replaced stream (a test's StringIO) may lack it
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, a listing without --yes included; 2 a user error;
    130 interrupted; 141 the output's reader went away)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # the model's weight-loading bar is noise here
    _printable_streams()
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        _show(f"\n{PROG}: interrupted: every finished turn is stored; run the same command to continue",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`strata history | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not fail too
        return EXIT_PIPE_CLOSED
    except (StrataError, ConversationFileError, OSError) as error:
        _show(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_USER_ERROR
    finally:
        close_all()

"""The command line's edges the CLI audit found (/tmp/audit/cli/report.md, findings 3-5, 7-9): where `export
--out` writes, a closed stdin, file names that look like JSON, reads on a mistyped --data-dir, the exit code
of a listing, an empty --formats, and `strata drop`, the way out that several one-line errors name.

Each runs `python -m strata` on a real memory, offline, and checks the exit code, the one stderr line of an
error and that nothing stored was lost or created.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from strata.memory.registry import close_all

from strata.api import Memory
from strata.checkpoint import sqlite_checkpointer

REPO = Path(__file__).resolve().parents[1]
TURNS = [
    {"speaker": "Ann", "text": "I adopted a cat named Miso last week.", "dia_id": "D1:1", "time": "2024-05-01"},
    {"speaker": "Bo", "text": "Lovely! I moved to Porto in March.", "dia_id": "D1:2", "time": "2024-05-01"},
    {"speaker": "Ann", "text": "I work as a nurse at the city hospital.", "dia_id": "D1:3", "time": "2024-05-01"},
]


def run(*args: str, env: dict[str, str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m strata ARGS` in `cwd` (a test's own folder: an old `--out -` wrote a file named '-' there)."""
    return subprocess.run([sys.executable, "-m", "strata", *args], cwd=cwd, env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)


def one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 2 and one stderr line `strata: error: ...` holding `words`, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr[-600:])
    assert len(lines) == 1 and lines[0].startswith("strata: error: "), result.stderr[-600:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def stored(data_dir: Path, namespace: str = "m") -> Path:
    """A folder holding a small memory (three turns in `namespace`), written in this process and closed."""
    Memory(namespace, data_dir=str(data_dir)).add(TURNS)
    close_all()  # an embedded folder is one process's at a time: hand it to the command line
    return data_dir


def test_export_writes_through_a_link_refuses_a_pipe_and_writes_stdout_on_dash(
    tmp_path: Path, offline_env: dict[str, str]
) -> None:
    """Finding 3: a link became an ordinary file (its target kept the old export), a FIFO was replaced by a
    file, and `--out -` wrote a file named '-'."""
    base = ["--data-dir", str(stored(tmp_path / "mem")), "--namespace", "m", "export", "--out"]
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "backup.json"
    target.write_text('{"old": true}', encoding="utf-8")
    target.chmod(0o600)
    link = tmp_path / "latest.json"
    link.symlink_to(Path("real") / "backup.json")
    wrote = run(*base, str(link), env=offline_env, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr[-600:]
    assert link.is_symlink() and link.readlink() == Path("real") / "backup.json", "the link stays a link"
    assert json.loads(target.read_text(encoding="utf-8"))["format"] == "strata-memory", "its target is written"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600, "the file keeps its permissions"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["backup.json"], "no partial file left"

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    refused = run(*base, str(pipe), env=offline_env, cwd=tmp_path)
    one_line_error(refused, "not a regular file", "--out -")
    assert stat.S_ISFIFO(pipe.lstat().st_mode), "the FIFO is still a FIFO"
    through = tmp_path / "to-pipe"
    through.symlink_to(pipe)
    one_line_error(run(*base, str(through), env=offline_env, cwd=tmp_path), "not a regular file")
    assert through.is_symlink() and stat.S_ISFIFO(pipe.lstat().st_mode)

    dash = run(*base, "-", env=offline_env, cwd=tmp_path)
    assert dash.returncode == 0, dash.stderr[-600:]
    document = json.loads(dash.stdout)  # stdout holds the document alone; the summary goes to stderr
    assert document["format"] == "strata-memory" and len(document["records"]) >= 3
    assert "to stdout" in dash.stderr and not (tmp_path / "-").exists()
    named = run(*base, "./-", env=offline_env, cwd=tmp_path)  # as --help says: a file named '-'
    assert named.returncode == 0 and not named.stdout.startswith("{") and (tmp_path / "-").is_file()


def test_chat_with_stdin_closed_or_an_empty_speaker_is_one_line(
    tmp_path: Path, offline_env: dict[str, str]
) -> None:
    """Finding 4: `strata chat <&-` crashed with AttributeError on isatty; `--speaker ''` was refused line by
    line while the chat went on (exit 0)."""
    data_dir = tmp_path / "mem"
    command = f"exec {sys.executable} -m strata --data-dir {data_dir} chat <&-"
    closed = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=offline_env, capture_output=True,
                            text=True, timeout=300)
    one_line_error(closed, "stdin is closed")
    for speaker in ("", "   "):
        nameless = run("--data-dir", str(data_dir), "chat", "--speaker", speaker, env=offline_env, cwd=tmp_path,
                       stdin="I moved to Porto.\n")
        one_line_error(nameless, "--speaker")
    assert not data_dir.exists(), "refused before the memory was opened: nothing stored, nothing created"


@pytest.mark.parametrize("name", ["[2024-05-01] backup.json", "{old}.json"])
def test_import_reads_a_file_whose_name_looks_like_json(
    name: str, tmp_path: Path, offline_env: dict[str, str]
) -> None:
    """Finding 5: a relative file name starting with '[' or '{' was parsed as JSON text."""
    memory = Memory("m", data_dir=str(tmp_path / "mem"))
    memory.add(TURNS)
    (tmp_path / name).write_text(memory.export().model_dump_json(), encoding="utf-8")
    close_all()
    result = run("--data-dir", str(tmp_path / "target"), "--namespace", "moved", "import", name,
                 env=offline_env, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("imported "), result.stderr[-600:]
    assert not result.stdout.startswith("imported 0 records"), result.stdout


@pytest.mark.slow  # many fresh processes: kept out of the default run's ten minutes
def test_reads_on_a_folder_without_a_memory_say_so_and_create_nothing(
    tmp_path: Path, offline_env: dict[str, str]
) -> None:
    """Finding 7: `stats` on a mistyped --data-dir printed zeros and left chroma/, chroma.lock and
    ledger.sqlite3 behind; `ask` and the rest created them too."""
    missing, empty = tmp_path / "nonexist" / "deeper", tmp_path / "empty"
    empty.mkdir()
    for command in (["stats"], ["history"], ["ask", "hi"], ["erase", "raw:D1:1"], ["drop"]):
        for folder in (missing, empty):
            one_line_error(run("--data-dir", str(folder), *command, env=offline_env, cwd=tmp_path),
                           "holds no memories", "--data-dir")
    assert not (tmp_path / "nonexist").exists() and not any(empty.iterdir()), "nothing was created"


def test_an_erase_listing_exits_0_and_honours_json(tmp_path: Path, offline_env: dict[str, str]) -> None:
    """Finding 8: without --yes, `erase` exited 1 (documented nowhere) and printed text under --json."""
    base = ["--data-dir", str(stored(tmp_path / "mem")), "--namespace", "m", "erase", "raw:D1:2"]
    listed = run(*base, "--json", env=offline_env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr[-600:]
    plan = json.loads(listed.stdout)
    assert plan["erased"] is False and "raw:D1:2" in plan["targets"] and plan["threads"] == []
    text = run(*base, env=offline_env, cwd=tmp_path)
    assert text.returncode == 0 and "would erase" in text.stdout and "--yes" in text.stdout
    assert Memory("m", data_dir=str(tmp_path / "mem")).get(["raw:D1:2"]), "a listing erases nothing"


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """This process's umask (and its children's) set to `mask` for a block."""
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.slow  # fresh processes (the command line): kept out of the default run's ten minutes
def test_memory_folders_and_new_exports_are_private_to_their_user(tmp_path: Path, offline_env: dict[str, str]) -> None:
    """Under the usual umask 022 the data folder and chroma/ were 0755 and a new `export --out` file 0644: every
    local user could read every conversation. The folders strata creates are 0700 and a new export 0600; a
    folder that already exists keeps its mode (one shared on purpose stays shared), as does a replaced export."""
    with umask(0o022):
        data_dir = stored(tmp_path / "made" / "mem")
        with sqlite_checkpointer(tmp_path / "threads-first"):  # a thread saved before any memory makes the folder
            pass
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o755)
        stored(shared)
        base = ["--data-dir", str(data_dir), "--namespace", "m", "export", "--out"]
        new = run(*base, str(tmp_path / "new.json"), env=offline_env, cwd=tmp_path)
        old = tmp_path / "old.json"
        old.write_text("{}", encoding="utf-8")
        replaced = run(*base, str(old), env=offline_env, cwd=tmp_path)
    assert new.returncode == 0 and replaced.returncode == 0, (new.stderr[-600:], replaced.stderr[-600:])
    made = [data_dir, data_dir / "chroma", tmp_path / "threads-first", shared / "chroma"]
    made += [folder for folder in (data_dir / "mirrors", shared / "mirrors") if folder.exists()]
    assert {str(folder): mode(folder) for folder in made} == {str(folder): 0o700 for folder in made}
    assert mode(tmp_path / "made") == mode(shared) == 0o755  # a parent made on the way, a folder that was there
    assert mode(tmp_path / "new.json") == 0o600 and mode(old) == 0o644


def loose(folder: Path) -> dict[str, int]:
    """What in `folder` (the folder itself included) another local user may read or enter, with its mode."""
    found = {}
    for path in [folder, *folder.rglob("*")]:
        if mode(path) & 0o077:
            found[str(path.relative_to(folder.parent))] = mode(path)
    return found


@pytest.mark.parametrize("acl", [True, False], ids=["default ACL", "no ACL (macOS)"])
def test_the_files_strata_writes_in_a_memory_folder_are_private_to_their_user(
    tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch, acl: bool
) -> None:
    """Found by audit: under umask 022 the ledger, the saved threads, the folder's lock, Chroma's database and its
    index folders and files were made 0644 (0755): private only through the 0700 folder around them, so readable
    by every local user in a folder made before with a looser mode, or once the files were moved or copied out.
    What strata writes is 0600 (its folders 0700), where the file system has default ACLs and where not (macOS):
    a new memory, its mirrors, its threads and an erase's rebuilt indexes; a file the user made keeps its mode."""
    from strata.memory import private_files, snapshots
    from strata.memory.erasure import compact_chroma

    if not acl:
        monkeypatch.setattr(private_files, "_private_by_default", lambda folder: None)
    monkeypatch.setattr(snapshots, "MIN_RECORDS", 1)  # every mirror saved
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    (shared / "notes.txt").write_text("the user's own", encoding="utf-8")
    with umask(0o022):
        for folder in (tmp_path / "new", shared):
            memory = Memory("m", data_dir=folder)
            memory.add(TURNS)
            memory.store.close()  # its mirrors saved
            with sqlite_checkpointer(folder):
                pass
            memory.erase(["raw:D1:2"])
            close_all()
            assert compact_chroma(folder / "chroma")  # every index rebuilt into new folders
    assert (shared / "mirrors").is_dir() and list((tmp_path / "new" / "chroma").glob("*/header.bin"))
    assert loose(tmp_path / "new") == {}
    assert loose(shared) == {"shared": 0o755, "shared/notes.txt": 0o644}


def test_graph_with_no_format_is_refused(tmp_path: Path, offline_env: dict[str, str]) -> None:
    """Finding 9: `graph --formats ''` exited 0 having written nothing."""
    base = ["--data-dir", str(stored(tmp_path / "mem")), "--namespace", "m", "graph", "--out", str(tmp_path / "g")]
    for formats in ("", ","):
        one_line_error(run(*base, "--formats", formats, env=offline_env, cwd=tmp_path), "--formats names no format")
    assert not (tmp_path / "g").exists()


@pytest.mark.slow  # many fresh processes: kept out of the default run's ten minutes
def test_drop_lists_then_deletes_even_a_namespace_no_other_command_can_open(
    tmp_path: Path, offline_env: dict[str, str]
) -> None:
    """The errors for a namespace whose Chroma half is gone (or whose import never finished) say to drop it;
    the command line had no way to. Without --yes, `drop` only lists (exit 0)."""
    data_dir = stored(tmp_path / "mem")
    stored(data_dir, "other")
    shutil.rmtree(data_dir / "chroma")  # the Chroma half lost: the ledger still remembers both namespaces
    base = ["--data-dir", str(data_dir), "--namespace", "m"]
    one_line_error(run(*base, "stats", env=offline_env, cwd=tmp_path), "drop the namespace")
    listed = run(*base, "drop", env=offline_env, cwd=tmp_path)
    assert listed.returncode == 0 and "would drop namespace 'm'" in listed.stdout, listed.stderr[-600:]
    assert "nothing was deleted" in listed.stdout and "history entries" in listed.stdout
    one_line_error(run(*base, "stats", env=offline_env, cwd=tmp_path), "drop the namespace")  # still there
    dropped = run(*base, "drop", "--yes", env=offline_env, cwd=tmp_path)
    assert dropped.returncode == 0 and "dropped namespace 'm'" in dropped.stdout, dropped.stderr[-600:]
    one_line_error(run(*base, "stats", "--json", env=offline_env, cwd=tmp_path), "there is no namespace 'm'")
    added = run(*base, "chat", "--speaker", "Ann", env=offline_env, cwd=tmp_path, stdin="I moved to Porto.\n")
    assert added.returncode == 0 and "error" not in added.stderr, added.stderr[-600:]  # usable again at once
    counts = json.loads(run(*base, "stats", "--json", env=offline_env, cwd=tmp_path).stdout)
    assert counts["history"] == 0 and counts["raw"]["active"] == 1 and "'m'" not in str(counts)
    one_line_error(run("--data-dir", str(data_dir), "--namespace", "other", "stats", env=offline_env, cwd=tmp_path),
                   "drop the namespace")  # another namespace is not touched


def test_history_and_undo_say_what_an_evolution_changed(tmp_path: Path, offline_env: dict[str, str]) -> None:
    """An evolution changes a note's tags and context, never its words: `history` showed no change at all, `undo`
    said only "it is active again" with the same text, and the undo's row kept subject/attribute/value."""
    memory = Memory("m", data_dir=str(stored(tmp_path / "mem")))
    before = memory.store.get_one("raw:D1:1")
    change = memory.store.evolve("raw:D1:1", tags=["cat"], context="Ann's new cat", reason="test evolution")
    close_all()
    base = ["--data-dir", str(tmp_path / "mem"), "--namespace", "m"]
    shown = run(*base, "history", "--limit", "1", env=offline_env, cwd=tmp_path)
    assert f"#{change.id}" in shown.stdout and "context " in shown.stdout and "-> \"Ann's new cat\"" in shown.stdout
    undone = run(*base, "undo", str(change.id), env=offline_env, cwd=tmp_path)
    assert undone.returncode == 0, undone.stderr[-600:]
    assert f"restored context \"Ann's new cat\" -> {before.context!r}" in undone.stdout, undone.stdout
    assert "restored tags '[\"cat\"]' -> " in undone.stdout, undone.stdout
    row = Memory("m", data_dir=str(tmp_path / "mem")).history(limit=1)[0]
    assert (row.old_fields["context"], row.new_fields["context"]) == ("Ann's new cat", before.context)


def test_history_of_an_empty_malformed_or_missing_record_says_so(tmp_path: Path, offline_env: dict[str, str]) -> None:
    """Found by audit: `history --record ''` (an unset field) listed the whole history, a malformed id answered
    "no changes for record '%%%'" where erase says it is not a memory id, and a record that does not exist read
    as one nothing ever changed."""
    base = ["--data-dir", str(stored(tmp_path / "mem")), "--namespace", "m", "history", "--record"]
    one_line_error(run(*base, "", env=offline_env, cwd=tmp_path), "--record is empty: give a record's id")
    one_line_error(run(*base, "%%%", env=offline_env, cwd=tmp_path), "'%%%' is not a memory id")
    one_line_error(run(*base, "raw:D9:9", env=offline_env, cwd=tmp_path),
                   "no record 'raw:D9:9' in namespace 'm' (never stored, or erased)")
    kept = run(*base, "raw:D1:2", env=offline_env, cwd=tmp_path)
    assert kept.returncode == 0 and kept.stdout == "no changes for record 'raw:D1:2' (it is as it was stored)\n"


def _locomo(turns: list[dict[str, str]], session_2: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A small LoCoMo conversation between Ann and Bo; `session_2` makes it two sessions."""
    conversation: dict[str, Any] = {"speaker_a": "Ann", "speaker_b": "Bo", "session_1": turns,
                                    "session_1_date_time": "1:56 pm on 8 May, 2023"}
    if session_2 is not None:
        conversation |= {"session_2": session_2, "session_2_date_time": "2:10 pm on 9 May, 2023"}
    return conversation


def test_a_later_sample_or_session_over_a_limit_is_refused_before_anything_is_stored(
    tmp_path: Path, offline_env: dict[str, str]
) -> None:
    """Audit (API, bug 3): the size limits were applied one `add` at a time, so a benchmark file's second sample
    with a turn over max_turn_chars (or a dia_id over 200 characters) was refused only after the first sample
    was stored, in a message naming neither the file nor the sample; a conversation's later session too."""
    good = [{"speaker": "Ann", "dia_id": "D1:1", "text": "I moved to Denver last week."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice, how is Denver?"}]
    long_turn = [good[0], {**good[1], "text": "word " * 9000}]
    long_id = [good[0], {**good[1], "dia_id": "D1:" + "2" * 201}]
    data_dir = tmp_path / "mem"
    for bad, words in ((long_turn, "more than max_turn_chars=40,000"), (long_id, "dia_id has 204 characters")):
        bench = tmp_path / "bench.json"
        bench.write_text(json.dumps([{"sample_id": "one", "conversation": _locomo(good)},
                                     {"sample_id": "two", "conversation": _locomo(bad)}]), encoding="utf-8")
        refused = run("--data-dir", str(data_dir), "--namespace", "bench", "ingest", str(bench), env=offline_env,
                      cwd=tmp_path)
        one_line_error(refused, f"{bench}, sample 'two', session 1: turn 2", words, "nothing was stored")
    two_sessions = tmp_path / "conv.json"  # one conversation: its first session was stored before the refusal
    two_sessions.write_text(json.dumps(_locomo(good, session_2=[{**long_turn[1], "dia_id": "D2:1"}])),
                            encoding="utf-8")
    refused = run("--data-dir", str(data_dir), "--namespace", "conv", "ingest", str(two_sessions), env=offline_env,
                  cwd=tmp_path)
    one_line_error(refused, f"{two_sessions}, session 2: turn 1", "max_turn_chars", "nothing was stored")
    for namespace in ("bench/one", "bench/two", "conv"):
        assert Memory(namespace, data_dir=str(data_dir)).store.count("raw") == 0, namespace


@contextmanager
def small_disk(folder: Path, size: str = "16m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `folder` (root only; skipped elsewhere), unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small disk needs root")
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()[:200]}")
    try:
        yield folder
    finally:
        close_all()
        # lazily: this process's Chroma may still hold files there until it exits, and a busy mount was left behind
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


def fill(disk: Path, leave: int, name: str = "filler") -> Path:
    """A file filling `disk` but for about `leave` bytes."""
    filler = disk / name
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(descriptor, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(descriptor)
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def test_a_full_disk_during_ingest_is_one_line_and_the_same_command_resumes(
    tmp_path: Path, offline_env: dict[str, str]
) -> None:
    """Audit (API, bug 2): a disk filling up mid-ingest ended `strata ingest` with Chroma's InternalError and a
    LangGraph traceback (exit 1). It is one line saying to free space; what was stored stays, and the same
    command, run once there is space, stores the rest."""
    turns = [{"speaker": ("Ann", "Bo")[n % 2], "session": str(1 + n // 10),
              "text": f"Turn {n}: " + " ".join(f"word{n}x{k} about Porto and cats" for k in range(60))}
             for n in range(20)]
    conversation = tmp_path / "conv.json"
    conversation.write_text(json.dumps(turns), encoding="utf-8")
    with small_disk(tmp_path / "disk") as disk:
        data_dir = stored(disk / "mem")
        filler = fill(disk, 256 * 1024)
        ingest = ("--data-dir", str(data_dir), "--namespace", "m", "ingest", str(conversation))
        one_line_error(run(*ingest, env=offline_env, cwd=tmp_path), f"the disk holding {data_dir} is full",
                       "free space there and run the same command")
        rest = fill(disk, 0, "rest")  # so full that the memory cannot even be opened
        one_line_error(run("--data-dir", str(data_dir), "--namespace", "m", "stats", env=offline_env, cwd=tmp_path),
                       f"the disk holding {data_dir} is full")
        rest.unlink()
        filler.unlink()
        resumed = run(*ingest, env=offline_env, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr[-600:]
        memory = Memory("m", data_dir=str(data_dir))
        assert memory.store.count("raw") == len(TURNS) + len(turns)
        assert memory.store.get_one("raw:D1:1").text == TURNS[0]["text"], "what was stored before is kept"


def test_a_full_disk_under_the_langgraph_store_is_one_line_and_the_same_batch_then_stores_it(
    tmp_path: Path, embedder: Any
) -> None:
    """Found by audit: a put on a full disk rose as sqlite3's OperationalError ("database or disk is full"). It
    is one line saying to free space; no put of the batch is an item (a version the full disk kept without its
    record is in no get, search or export), and the same batch, once there is room, stores each once."""
    from langgraph.store.base import PutOp
    from strata.memory import store_items
    from strata.memory.errors import StrataError

    from strata.langgraph_store import StrataStore

    with small_disk(tmp_path / "disk") as disk:
        store = StrataStore(data_dir=disk / "mem")
        store.put(("m",), "kept", {"text": "Ann keeps bees on the roof."})
        batch = [PutOp(("m",), f"note-{n}", {"text": f"{n} " + os.urandom(20_000).hex()}) for n in range(30)]
        filler = fill(disk, 256 * 1024)
        with pytest.raises(StrataError) as caught:
            store.batch(batch)
        assert str(caught.value).startswith(f"the disk holding {disk / 'mem'} is full: free space there")
        assert all(store.get(("m",), op.key) is None for op in batch)
        filler.unlink()
        close_all()  # (embedded Chroma, once a write of it failed for want of space, waits for ever on the next)
        assert [item.key for item in Memory("m", data_dir=disk / "mem").export().items] == ["kept"]
        store.batch(batch)
        assert all(store.get(("m",), op.key).value == op.value for op in batch)  # type: ignore[union-attr]
        versions = store_items.versions(open_store_ledger(store), "m")
        assert sorted(v.key for v in versions) == sorted(["kept", *(op.key for op in batch)])


def open_store_ledger(store: Any) -> Any:
    from strata.memory.registry import ledger_for

    return ledger_for(store.settings)


def test_after_a_killed_import_the_commands_say_how_to_finish_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit: after a killed import, `ask` and `graph` said the memory was empty and to ingest (which was then
    refused), `chat` refused every line and exited 0, and Ctrl-C during an import said every finished turn was
    stored, when the import had been rolled back."""
    import io

    from strata.memory.store import IMPORTING

    from strata.cli import main

    folder = tmp_path / "mem"
    memory = Memory("m", data_dir=str(folder))
    memory.store.ledger.set_state("m", IMPORTING, "2024-05-01T00:00:00")  # what a killed import leaves
    close_all()
    where = ["--data-dir", str(folder), "--namespace", "m"]
    for command in (["ask", "where?"], ["ask", "--retrieve-only", "where?"]):
        assert main([*where, *command]) == 2
        error = capsys.readouterr().err
        assert "has not finished" in error and "run the import again" in error and "ingest" not in error
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\nagain\n"))
    assert main([*where, "chat"]) == 2  # every line refused
    assert capsys.readouterr().err.count("has not finished") == 2

    export = tmp_path / "export.json"
    other = Memory("other", data_dir=str(tmp_path / "other"))
    other.add([{"speaker": "Ann", "text": "I live in Paris."}])  # (an empty namespace is no export: unknown)
    export.write_text(other.export().model_dump_json())
    close_all()

    def interrupted(*_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Memory, "import_from", interrupted)
    assert main(["--data-dir", str(tmp_path / "new"), "--namespace", "n", "import", str(export)]) == 130
    error = capsys.readouterr().err.strip()
    assert "rolled back and nothing was imported" in error and "every finished turn" not in error
    assert len(error.splitlines()) == 1


def test_the_readmes_compressed_export_makes_a_private_file(tmp_path: Path, offline_env: dict[str, str]) -> None:
    """Audit: the README's `export --out - | gzip > conv-26.json.gz` left a 0644 file under umask 022, where
    it promises that exports are 0600."""
    line = next(x for x in (REPO / "README.md").read_text().splitlines() if "export --out - | gzip >" in x)
    command = line.split("#")[0].replace(".venv/bin/strata", f"{sys.executable} -m strata")
    Memory("conv-26", data_dir=str(tmp_path / ".strata")).add("Lena moved to Porto.")
    close_all()
    result = subprocess.run(["sh", "-c", f"umask 022; {command}"], cwd=tmp_path, env=offline_env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE((tmp_path / "conv-26.json.gz").stat().st_mode) == 0o600


def test_the_chroma_server_flags_reach_the_memory_and_never_print_the_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by audit (runs/audit_docs, item 10): the Python API takes chroma_ssl and chroma_auth_header, but the
    command line had no flags for them, and --help named neither STRATA_ variable. Their values reach the memory;
    an error about either never quotes the header (it holds a token)."""
    from strata.cli import _settings, build_parser, main

    flags = ["--chroma-ssl", "true", "--chroma-auth-header", "X-Chroma-Token: s3cret"]
    for argv in ([*flags, "stats"], ["stats", *flags]):  # before or after the subcommand, as every setting
        assert _settings(build_parser().parse_args(argv)) == {
            "chroma_ssl": "true", "chroma_auth_header": "X-Chroma-Token: s3cret"}
    helped = " ".join(build_parser().format_help().split())
    assert "(STRATA_CHROMA_SSL," in helped and "(STRATA_CHROMA_AUTH_HEADER," in helped
    turns = tmp_path / "turns.json"
    turns.write_text('[{"speaker": "Ann", "text": "I live in Denver."}]')
    for header in ("X-Chroma-Token s3cret", "X-Chroma-Token: s3cret"):  # malformed, then a server that is not there
        code = main(["--data-dir", str(tmp_path / "mem"), "--chroma-host", "127.0.0.1", "--chroma-port", "1",
                     "--chroma-ssl", "true", "--chroma-auth-header", header, "ingest", str(turns)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "chroma" in err and "s3cret" not in err, err


def test_a_misspelt_namespace_is_refused_by_every_command_that_does_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by audit: on a folder holding 'ann' and 'bob', `--namespace anm export --out backup.json` wrote a
    valid export of 0 records and exited 0 (a backup script would not notice); stats, history, consolidate and
    the drop listing printed zeros and exited 0. Each is one line now, naming the namespaces there, and
    nothing is written; `Memory.export()` raises NotFoundError; the writing commands create the namespace."""
    from strata.memory.errors import NotFoundError

    from strata.cli import main

    data_dir = stored(stored(tmp_path / "mem", "ann"), "bob")
    out, graph = tmp_path / "backup.json", tmp_path / "graph"
    typo = ["--data-dir", str(data_dir), "--namespace", "anm"]
    for command in (["export", "--out", str(out)], ["export", "--out", "-"], ["stats"], ["history"], ["consolidate"],
                    ["drop"], ["drop", "--yes"], ["undo"], ["erase", "--about", "Ann"], ["ask", "Where?"],
                    ["explain", "Where?"], ["graph", "--formats", "json", "--out", str(graph)]):
        assert main([*typo, *command]) == 2, command
        said = capsys.readouterr()
        lines = said.err.strip().splitlines()
        assert len(lines) == 1 and "there is no namespace 'anm'" in lines[0] and "'ann', 'bob'" in lines[0], lines
        assert "--namespace" in lines[0] and not said.out
    assert not out.exists() and not graph.exists()
    with pytest.raises(NotFoundError, match=r"there is no namespace 'anm' .*'ann', 'bob'"):
        Memory("anm", data_dir=str(data_dir)).export()
    assert Memory("anm", data_dir=str(data_dir)).stats()["raw"]["active"] == 0  # read as a new, empty memory
    ledger = Memory("anm", data_dir=str(data_dir)).store.ledger
    assert ledger.live_namespaces() == ["ann", "bob"] and not ledger.knows("anm")  # nothing was created
    assert main(["--data-dir", str(data_dir), "--namespace", "ann", "export", "--out", str(out)]) == 0
    assert main([*typo, "import", str(out)]) == 0  # a writing command creates it
    capsys.readouterr()
    assert main([*typo, "stats"]) == 0 and "namespace 'anm'" in capsys.readouterr().out

"""The `strata` command as a user meets it: a subprocess, its exit code, stdout and stderr.

Bad input must end in exit code 2 and one stderr line `strata: error: ...`
with no traceback. A conversation file is validated whole before anything is
written: a file with one bad turn stores nothing of itself, and whatever was
stored before stays as it was.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from strata.graph.context import Context
from strata.memory.errors import InputError
from strata.memory.registry import close_all

from strata.api import Memory
from strata.conversations import load_conversations
from strata.ingestion import ingest_conversation

REPO = Path(__file__).resolve().parents[1]


def strata(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m strata ARGS` from the repo, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "strata", *args], cwd=REPO, env=env, input=stdin, capture_output=True, text=True,
        timeout=300,
    )


def assert_user_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit code 2, exactly one stderr line starting `strata`, no traceback; returns the line."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("strata") and "error:" in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def write_turns(path: Path, texts: list[str], session: int) -> Path:
    turns = [
        {"speaker": "Ann" if i % 2 else "Bo", "text": text, "dia_id": f"D{session}:{i}", "time": f"2024-05-0{session}"}
        for i, text in enumerate(texts, start=1)
    ]
    path.write_text(json.dumps(turns), encoding="utf-8")
    return path


def _ingest_here(file: Path, data_dir: Path, namespace: str = "default", limit_sessions: int | None = None) -> None:
    """Store `file` as `strata ingest FILE --data-dir DATA_DIR [--namespace N] [--limit-sessions L]` does, in
    this process (a test's setup, not what it tests), and hand the folder back closed."""
    (conversation,) = load_conversations(file)
    ingest_conversation(Memory(namespace, data_dir=str(data_dir)), conversation, limit_sessions)
    close_all()


def test_missing_file(tmp_path: Path, data_dir: Path, offline_env: dict[str, str]) -> None:
    result = strata("ingest", str(tmp_path / "nowhere.json"), "--data-dir", str(data_dir), env=offline_env)
    assert_user_error(result, "nowhere.json", "no such file")
    assert not data_dir.exists(), "a failed ingest must not even create the memory folder"


def test_a_link_that_leads_nowhere(tmp_path: Path, data_dir: Path, offline_env: dict[str, str]) -> None:
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")  # a loop, told as "no such file" before
    result = strata("ingest", str(tmp_path / "a.json"), "--data-dir", str(data_dir), env=offline_env)
    assert_user_error(result, "a.json", "is a link that leads to no file")


def test_malformed_json(tmp_path: Path, data_dir: Path, offline_env: dict[str, str]) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('[{"speaker": "Ann", "text": "hello"},', encoding="utf-8")
    result = strata("ingest", str(bad), "--data-dir", str(data_dir), env=offline_env)
    assert_user_error(result, "broken.json", "not valid JSON", "line 1")


def test_a_pipe_a_device_and_a_number_too_long_to_read_are_one_line(
    tmp_path: Path, data_dir: Path, offline_env: dict[str, str]
) -> None:
    """A pipe waited for a writer for ever and /dev/zero was read until memory ran out; a number of more
    than 4,300 digits stopped the JSON reader with a traceback."""
    pipe = tmp_path / "turns.fifo"
    os.mkfifo(pipe)
    huge = tmp_path / "huge.json"
    huge.write_text('[{"speaker": "Ann", "text": "hi", "time": ' + "9" * 5_000 + "}]", encoding="utf-8")
    for command, path, words in (("ingest", str(pipe), "not a regular file"),
                                 ("import", "/dev/zero", "not a regular file"),
                                 ("ingest", str(huge), "JSON readers refuse")):
        result = strata(command, path, "--data-dir", str(data_dir), env=offline_env)
        assert_user_error(result, words)


def test_a_file_or_setting_that_cannot_work_says_why_and_stores_nothing(
    tmp_path: Path, data_dir: Path, offline_env: dict[str, str]
) -> None:
    """Two samples of one benchmark file with one sample_id went to one namespace, the second refused after
    the first was stored; a wrong STRATA_MAX_OPEN_STORES was told as an unwritable folder; a folder name
    too long for the file system was an errno."""
    def sample(text: str) -> dict[str, object]:
        return {"sample_id": "s1", "conversation": {"speaker_a": "Ann", "speaker_b": "Bo",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [{"speaker": "Ann", "text": text, "dia_id": "D1:1"}]}}
    two = tmp_path / "two.json"
    two.write_text(json.dumps([sample("I love hiking."), sample("I hate hiking.")]), encoding="utf-8")
    assert_user_error(strata("ingest", str(two), "--data-dir", str(data_dir), env=offline_env),
                      "two conversations with the sample_id 's1'", "nothing was stored")
    assert not data_dir.exists()
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps([{"speaker": "Ann", "text": "I moved to Denver."}]), encoding="utf-8")
    assert_user_error(strata("ingest", str(turns), "--data-dir", str(data_dir),
                             env={**offline_env, "STRATA_MAX_OPEN_STORES": "0"}),
                      "STRATA_MAX_OPEN_STORES='0': give a whole number of at least 1")
    assert_user_error(strata("stats", "--data-dir", str(tmp_path / ("a" * 300)), env=offline_env),
                      "File name too long", "point data_dir")


def test_unknown_subcommand_is_a_usage_error(offline_env: dict[str, str]) -> None:
    result = strata("remember", "this", env=offline_env)
    assert_user_error(result, "invalid choice", "remember")


def test_unknown_mode_through_the_api() -> None:
    with pytest.raises(InputError) as caught:
        Context(mode="x")  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message and "unknown mode 'x'" in message and "retrieve" in message
    with pytest.raises(InputError, match="unknown mode"):
        Memory("ann").context("x")


def test_empty_question(data_dir: Path, offline_env: dict[str, str]) -> None:
    for question in ("", "   ", "\u200b"):  # no character a reader can see: found by audit (it was answered)
        result = strata("ask", question, "--data-dir", str(data_dir), env=offline_env)
        assert_user_error(result, "question is empty")
    result = strata("graph", "--question", " ", "--data-dir", str(data_dir), env=offline_env)
    assert_user_error(result, "question is empty", "strata graph --question")


def test_bad_turn_rejects_the_whole_file_and_keeps_earlier_data(
    tmp_path: Path, data_dir: Path, offline_env: dict[str, str], embedder: object
) -> None:
    good = write_turns(tmp_path / "good.json", ["I adopted a cat called Miso.", "Lovely, what colour is she?"], 1)
    stored = strata("ingest", str(good), "--data-dir", str(data_dir), "--namespace", "ann", "--json", env=offline_env)
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["new_turns"] == 2

    bad = write_turns(tmp_path / "bad.json", ["We moved to Oslo.", "Since when?", "   "], 2)
    result = strata("ingest", str(bad), "--data-dir", str(data_dir), "--namespace", "ann", env=offline_env)
    assert_user_error(result, "bad.json", "turn 3", "empty text")

    memory = Memory("ann", data_dir=str(data_dir))
    raw_ids = sorted(record.id for record in memory.store.all("raw"))
    assert raw_ids == ["raw:D1:1", "raw:D1:2"], "the earlier turns stay, and nothing of the bad file is stored"
    assert memory.get(["raw:D1:1"])[0].text == "I adopted a cat called Miso."


def test_a_second_conversation_into_the_same_namespace_is_refused_whole(
    locomo_dir: Path, data_dir: Path, offline_env: dict[str, str], embedder: object
) -> None:
    """Both conversations number their turns D1:1, D1:2, ...: the second would replace the first's turns."""
    where = ("--data-dir", str(data_dir), "--namespace", "friends")
    _ingest_here(locomo_dir / "conv-26.json", data_dir, "friends", limit_sessions=1)  # the first: setup
    memory = Memory("friends", data_dir=str(data_dir))
    before = {r.id: r.text for r in memory.store.all("raw")}
    close_all()

    second = strata("ingest", str(locomo_dir / "conv-30.json"), "--limit-sessions", "2", *where, env=offline_env)

    assert_user_error(second, "turn D1:1", "already stored with other words", "another namespace")
    assert {r.id: r.text for r in Memory("friends", data_dir=str(data_dir)).store.all("raw")} == before
    close_all()
    again = strata("ingest", str(locomo_dir / "conv-26.json"), "--limit-sessions", "1", "--json", *where,
                   env=offline_env)
    assert again.returncode == 0 and json.loads(again.stdout)["new_turns"] == 0  # the same words: skipped


def test_ask_on_an_empty_memory_says_what_to_do(data_dir: Path, offline_env: dict[str, str]) -> None:
    result = strata("ask", "Where does Ann live?", "--data-dir", str(data_dir), env=offline_env)
    assert_user_error(result, "holds no memories", "strata ingest")


def test_chat_stores_each_line_and_answers(data_dir: Path, offline_env: dict[str, str]) -> None:
    lines = "I moved to Porto last week.\n\nMy sister Sofia lives in Lisbon.\n/quit\nnever read\n"
    result = strata("chat", "--speaker", "Marco", "--data-dir", str(data_dir), "--namespace", "m", env=offline_env,
                    stdin=lines)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    stats = strata("stats", "--json", "--data-dir", str(data_dir), "--namespace", "m", env=offline_env)
    counts = json.loads(stats.stdout)
    assert counts["raw"]["active"] == 2, "two non-empty lines before /quit are stored, the blank one is skipped"


def test_chat_acknowledges_a_statement_and_answers_a_question(data_dir: Path, offline_env: dict[str, str]) -> None:
    """A statement got "Not in memory.", as if it had asked something: it is stored, and the reply says so."""
    lines = "I moved to Denver last week.\nWhat is my cat called?\nWhere do I live?\nPlease forget that I moved.\n"
    result = strata("chat", "--speaker", "Ann", "--data-dir", str(data_dir), "--namespace", "m", env=offline_env,
                    stdin=lines)
    assert result.returncode == 0, result.stderr
    replies = [line for line in result.stdout.splitlines() if not line.startswith("  cited:")]
    assert replies[:3] == ["Noted: I will remember that.", "Not in memory.", "Denver"]
    assert re.fullmatch(r"Forgot \d+ record\(s\)\.", replies[3]), replies[3]  # a request to forget says what it did


def test_a_reader_that_stops_early_ends_the_output_quietly(
    tmp_path: Path, data_dir: Path, offline_env: dict[str, str]
) -> None:
    """`strata history | head -1` printed 'error: [Errno 32] Broken pipe' and exited 2. Here the reader
    (`true`) is gone before anything is written."""
    texts = ["I planted a tree today.", "Which one?"]
    _ingest_here(write_turns(tmp_path / "t.json", texts, 1), data_dir)  # what is stored is not what is tested
    shell = f"{sys.executable} -m strata --data-dir {data_dir} stats | true; exit ${{PIPESTATUS[0]}}"
    result = subprocess.run(["bash", "-c", shell], cwd=REPO, env=offline_env, capture_output=True, text=True,
                            timeout=300)
    assert result.stderr == "" and result.returncode == 141  # as a Unix tool whose reader went away


def test_demo_on_the_shipped_sample(offline_env: dict[str, str]) -> None:
    result = strata("demo", "--questions", "4", env=offline_env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    print(out)
    assert "ingested" in out and "31 turns" in out
    # the folder is deleted at the end: its name is not given as if it could be opened afterwards
    assert "memory: namespace 'demo' in a temporary folder, deleted when the demo ends" in out
    assert "strata-demo-" not in out
    assert out.count("our answer:") == 4
    assert out.count("evidence ids:") == 4
    evidence_lines = [line for line in out.splitlines() if "evidence ids:" in line]
    assert all("D" in line and ":" in line.split("evidence ids:")[1] for line in evidence_lines)
    assert "gold evidence fully reached for" in out


def _longer_conversation(folder: Path, rounds: int = 2) -> tuple[Path, int]:
    """The sample's sessions replayed `rounds` times as later sessions (a year apart, ids renumbered),
    so an interrupt after the first session's turns lands well before the ingest ends on any machine
    (five of the six sessions are still to come; the resumed run stores them)."""
    sample = json.loads((REPO / "strata" / "data" / "sample_conversation.json").read_text())
    sessions = sorted(
        (k for k in sample if k.startswith("session_") and not k.endswith("date_time")), key=lambda k: int(k[8:])
    )
    longer: dict[str, object] = {"speaker_a": sample["speaker_a"], "speaker_b": sample["speaker_b"]}
    turns = 0
    for round_ in range(rounds):
        for key in sessions:
            number = round_ * len(sessions) + int(key[8:])
            longer[f"session_{number}_date_time"] = sample[f"{key}_date_time"].replace("2024", str(2024 + round_))
            longer[f"session_{number}"] = [
                {**turn, "dia_id": f"D{number}:{turn['dia_id'].split(':')[1]}"} for turn in sample[key]
            ]
            turns += len(sample[key])
    path = folder / "longer_conversation.json"
    path.write_text(json.dumps(longer))
    return path, turns


def test_ctrl_c_keeps_stored_turns_and_the_same_command_resumes(
    data_dir: Path, offline_env: dict[str, str], tmp_path: Path
) -> None:
    conversation, total = _longer_conversation(tmp_path)
    command = [sys.executable, "-m", "strata", "ingest", str(conversation), "--data-dir", str(data_dir), "--json"]
    # A shell starts background jobs with Ctrl-C ignored, and a child inherits that: give it back, as a
    # terminal would, so the test means the same wherever the suite runs (`make test &` included).
    process = subprocess.Popen(command, cwd=REPO, env=offline_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ledger = data_dir / "ledger.sqlite3"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None and _derived_turns(ledger) < 3:
        time.sleep(0.05)
    assert process.poll() is None, "the ingest ended before the first session's turns were seen"
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, f"exit {process.returncode}; stderr: {stderr!r}; stdout: {stdout[-300:]!r}"
    assert len(stderr.strip().splitlines()) == 1 and "interrupted" in stderr and "Traceback" not in stderr

    resumed = strata("ingest", str(conversation), "--data-dir", str(data_dir), "--json", env=offline_env)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["stats"]["raw"]["active"] == total
    assert 0 < summary["new_turns"] < total, "the first run's turns were kept and skipped, the rest stored"


def _derived_turns(ledger: Path) -> int:
    """Turns the memory role has finished, read from the ledger without disturbing the writer."""
    if not ledger.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=1) as conn:
            row = conn.execute("SELECT count(DISTINCT src) FROM links WHERE type = 'temporal'").fetchone()
    except sqlite3.Error:
        return 0
    return int(row[0]) if row else 0


@pytest.mark.slow  # many fresh processes: kept out of the default run's ten minutes
def test_reindex_rebuilds_a_closed_folder_and_refuses_one_without_chroma(
    tmp_path: Path, data_dir: Path, offline_env: dict[str, str],
) -> None:
    """`strata reindex` is the operator's rebuild of a stopped server's folder (README, "Erase for good"):
    every record and answer stay; a folder without Chroma's database is refused and nothing is created."""
    conversation = write_turns(tmp_path / "t.json", ["I adopted a dog named Rex.", "Rex loves the beach."], 1)
    _ingest_here(conversation, data_dir)  # as `strata ingest` stores it; the commands tested are reindex and ask
    before = strata("ask", "What is the dog called?", "--retrieve-only", "--json", "--data-dir", str(data_dir),
                    env=offline_env)
    rebuilt = strata("reindex", str(data_dir / "chroma"), env=offline_env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    # four: a kind never written has no collection (no summaries before a consolidation)
    assert "rebuilt 4 collections" in rebuilt.stdout and "chroma vacuum" in rebuilt.stdout
    after = strata("ask", "What is the dog called?", "--retrieve-only", "--json", "--data-dir", str(data_dir),
                   env=offline_env)
    assert after.returncode == 0 and json.loads(after.stdout) == json.loads(before.stdout)

    assert_user_error(strata("reindex", str(data_dir), env=offline_env), "holds no Chroma database", "chroma/")
    missing = tmp_path / "typo"
    assert_user_error(strata("reindex", str(missing), env=offline_env), "holds no Chroma database")
    assert not missing.exists()

"""Processes sharing one embedded memory folder: they take turns (the folder lock), every turn is
stored once and derived, and one that cannot wait gets one clear line and writes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from servers import REPO
from strata.agents.memory import PENDING, open_segment
from strata.memory.registry import close_all

from strata.api import Memory

NAMESPACE = "conv-26"
PROCESS_TIMEOUT = 600


# ----------------------------------------------------------------------------- processes on one folder

WRITER = r'''
import sys
from strata.api import Memory
data_dir, namespace, writer, count = sys.argv[1:5]
memory = Memory(namespace, data_dir=data_dir)
for n in range(int(count)):
    memory.add({"speaker": f"Writer{writer}", "text": f"I visited the museum number {n} with Ana{writer} yesterday."})
memory.end_session()
'''
PROCESSES = 3
TURNS_PER_PROCESS = 15


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_three_processes_on_one_embedded_folder_take_turns(data_dir: Path, offline_env: dict[str, str]) -> None:
    env = {**offline_env, "STRATA_LOCK_WAIT": str(PROCESS_TIMEOUT)}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(data_dir), NAMESPACE, str(w), str(TURNS_PER_PROCESS)],
                         cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(PROCESSES)
    ]
    for writer in writers:
        _, stderr = writer.communicate(timeout=PROCESS_TIMEOUT)
        assert writer.returncode == 0, stderr
    store = Memory(NAMESPACE, data_dir=str(data_dir)).store
    raws = store.all("raw", include_inactive=True)
    texts = sorted(r.text for r in raws)
    expected = sorted(f"I visited the museum number {n} with Ana{w} yesterday."
                      for w in range(PROCESSES) for n in range(TURNS_PER_PROCESS))
    assert texts == expected  # every turn stored once
    assert sorted(int(r.dialogue_id[1:]) for r in raws) == list(range(1, PROCESSES * TURNS_PER_PROCESS + 1))
    assert store.ledger.get_state(NAMESPACE, PENDING, []) == [] and open_segment(store).turn_ids == []
    assert sorted(i for e in store.all("episode") for i in e.source_ids) == sorted(r.dialogue_id for r in raws)
    derived = {f.source_ids[0] for f in store.all("fact")}
    assert derived == {r.dialogue_id for r in raws}  # every turn derived


def test_a_process_that_cannot_wait_for_a_busy_folder_gets_one_line(
    tmp_path: Path, data_dir: Path, offline_env: dict[str, str], embedder: object
) -> None:
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    memory.add({"speaker": "Caroline", "text": "I moved to Boston last spring.", "dia_id": "D1:1"})
    before = (memory.stats(), memory.store.ledger.get_state(NAMESPACE, PENDING, []))
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps([{"speaker": "Caroline", "text": "I adopted a cat called Miso.", "dia_id": "D1:2"}]))
    env = {**offline_env, "STRATA_LOCK_WAIT": "0.5"}
    busy = subprocess.run(
        [sys.executable, "-m", "strata", "ingest", str(turns), "--data-dir", str(data_dir), "--namespace", NAMESPACE],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT,
    )
    assert busy.returncode == 2
    lines = busy.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pid {os.getpid()}" in lines[0] and "Chroma server" in lines[0], busy.stderr
    assert (memory.stats(), memory.store.ledger.get_state(NAMESPACE, PENDING, [])) == before  # nothing written
    close_all()  # the folder is free again: the same command now succeeds
    again = subprocess.run(
        [sys.executable, "-m", "strata", "ingest", str(turns), "--data-dir", str(data_dir), "--namespace", NAMESPACE],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT,
    )
    assert again.returncode == 0, again.stderr
    assert Memory(NAMESPACE, data_dir=str(data_dir)).stats()["raw"]["active"] == 2


def test_a_folder_handed_to_another_process_and_back_serves_what_it_wrote(
    tmp_path: Path, data_dir: Path, offline_env: dict[str, str], embedder: object
) -> None:
    """`close_all()` hands the folder over: another process writes, and this one opens it again. Chroma
    kept the folder's system open in this process, and the reopened memory served its stale indexes:
    every read and write then failed ("Error finding id"), in later processes too."""
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    memory.add({"speaker": "Ann", "text": "I keep bees in my garden.", "dia_id": "D1:1"})
    assert memory.retrieve("Who keeps bees?").evidence
    close_all()
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps([{"speaker": "Bob", "text": "My violin teacher lives in Vienna.", "dia_id": "D1:2"}]))
    other = subprocess.run(
        [sys.executable, "-m", "strata", "ingest", str(turns), "--data-dir", str(data_dir), "--namespace", NAMESPACE],
        cwd=REPO, env=offline_env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT,
    )
    assert other.returncode == 0, other.stderr
    again = Memory(NAMESPACE, data_dir=str(data_dir))
    assert "raw:D1:2" in [e.id for e in again.retrieve("Where does the violin teacher live?").evidence]
    assert again.add({"speaker": "Ann", "text": "I also grow tomatoes.", "dia_id": "D1:3"}).stored_ids
    assert sorted(r.dialogue_id for r in again.store.all("raw")) == ["D1:1", "D1:2", "D1:3"]


def test_a_forked_child_waits_for_the_folder_and_says_so_in_one_line(data_dir: Path, embedder: object) -> None:
    """A process that opened the memory forks (gunicorn --preload, multiprocessing's fork): the child
    inherited the parent's Chroma system without its threads and hung at its first read. It now opens
    the memory afresh, waits for the folder its parent holds, and gets the busy folder's one line."""
    import signal
    import time

    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    memory.add({"speaker": "Ann", "text": "I keep bees in my garden.", "dia_id": "D1:1"})
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened through the pipe, and leave without running pytest's exit
        os.close(read)
        os.environ["STRATA_LOCK_WAIT"] = "0.5"
        try:
            from strata.memory.embeddings import get_embedder

            embedder = get_embedder()  # the parent's had a background thread, which the child has not
            embedder.prefetch(["Do bees sleep?"], background=True)
            assert embedder.embed(["Do bees sleep?"]).shape == (1, 384)
            Memory(NAMESPACE, data_dir=str(data_dir)).stats()
            said = "opened"
        except BaseException as error:  # reported to the parent, which asserts on it
            said = f"{type(error).__name__}: {error}"
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
        time.sleep(0.05)
    else:
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    said = os.read(read, 4096).decode()
    os.close(read)
    assert said.startswith("ConfigError: ") and "in use by another process" in said and "\n" not in said, said
    assert f"pid {os.getpid()}" in said
    assert memory.add({"speaker": "Ann", "text": "I also grow tomatoes.", "dia_id": "D1:2"}).stored_ids


def test_close_all_hands_over_a_folder_whose_stores_were_closed_as_idle(data_dir: Path, embedder: object) -> None:
    """A store closed as idle (past `STRATA_MAX_OPEN_STORES`) leaves its Chroma client open; close_all()
    forgot only the clients of the stores still open, so the folder stayed held by this process."""
    from strata.memory.chroma import open_client, open_clients
    from strata.memory.settings import StoreSettings

    settings = StoreSettings(data_dir=str(data_dir))
    open_client(settings)  # as a store closed as idle leaves it: a client, and no store
    assert settings in open_clients()
    close_all()
    assert open_clients() == []
    lock = settings.chroma_path.with_name(f"{settings.chroma_path.name}.lock")
    taken = subprocess.run([sys.executable, "-c", (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"
    ), str(lock)], capture_output=True, text=True, timeout=60)
    assert taken.returncode == 0, taken.stderr  # another process can take the folder now

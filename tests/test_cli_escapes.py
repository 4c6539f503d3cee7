"""Stored text on the terminal: control characters a turn holds are shown, never obeyed, and kept as stored.

A turn may hold `ESC [2J` (clear the screen), `ESC ]0;...BEL` (set the window title) or an RTL override; the
commands that print stored text (`ask`, `explain`, `history`, `chat`, their `--json`, `export --out -`) write
them as escapes. The memory is real (embedded Chroma, the local MiniLM), the chat model the offline one.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from strata.memory.printable import printable, printable_json
from strata.memory.registry import close_all

from strata.api import Memory
from strata.cli import main

TEXT = "My PIN is safe \x1b]0;owned\x07\x1b[2J\x1b[1;31mI moved to Lisbon\x1b[0m \u202egnp.exe\u202c \x9b2J\x7f\r."
# what a terminal would act on: ESC, BEL, CR, DEL, an 8-bit CSI, a bidirectional override
ACTING = ("\x1b", "\x07", "\r", "\x7f", "\x9b", "\u202e")


def test_printable_writes_controls_as_escapes_and_keeps_the_rest() -> None:
    assert printable("a\x1b[2J\x07b") == "a\\x1b[2J\\x07b"
    assert printable("\u202eabc\u2066\x85\x9b\r") == "\\u202eabc\\u2066\\x85\\x9b\\x0d"
    assert printable("line one\n\tline two: Zoë, 李, 🎉, \u200d") == "line one\n\tline two: Zoë, 李, 🎉, \u200d"
    document = json.dumps({"t": TEXT}, ensure_ascii=False)
    assert json.loads(printable_json(document)) == {"t": TEXT}
    assert not any(c in printable_json(document) for c in ACTING)


def strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [s for item in value for s in strings(item)] if isinstance(value, list) else []


@pytest.fixture
def stored(data_dir: Path, embedder: object) -> Path:
    Memory("e", data_dir=str(data_dir)).add([{"speaker": "Ann", "text": TEXT, "time": "2024-05-01T10:00"},
                                            {"speaker": "Bob", "text": "Lisbon, nice!", "time": "2024-05-01T10:01"}])
    close_all()
    return data_dir


def test_commands_show_the_control_characters_of_stored_text_as_escapes(
    stored: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by audit: `strata ask` and `explain` wrote a turn's escape sequences to the terminal as they were,
    so a conversation file could clear the screen and retitle the window of whoever asked about it."""
    base = ["--data-dir", str(stored), "--namespace", "e"]
    capsys.readouterr()
    for command in (["ask", "Where did Ann move?"], ["ask", "--retrieve-only", "Where did Ann move?"],
                    ["explain", "Where did Ann move?"], ["history"]):
        assert main([*base, *command]) == 0
        out = capsys.readouterr().out
        assert not any(c in out for c in ACTING), (command, out)
        if command[0] != "history":  # (history shows the words an edit changed: none here)
            assert "\\x1b[2J" in out, (command, out)
    monkeypatch.setattr("sys.stdin", io.StringIO(f"remember {TEXT}\n/quit\n"))
    assert main([*base, "chat", "--speaker", "Bob"]) == 0
    out = capsys.readouterr().out
    assert out and not any(c in out for c in ACTING), out
    for command in (["ask", "--json", "Where did Ann move?"], ["explain", "--json", "Where did Ann move?"],
                    ["export", "--out", "-"]):
        assert main([*base, *command]) == 0
        out = capsys.readouterr().out
        assert not any(c in out for c in ACTING), (command, out)
        assert any(TEXT in text for text in strings(json.loads(out))), command  # the same text, once parsed
    assert TEXT in [r.text for r in Memory("e", data_dir=str(stored)).store.all("raw")]

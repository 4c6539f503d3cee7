"""The PNG of `strata graph`: whatever a turn or a question holds is drawn as written, in one clean run.

The picture is drawn from a `MemoryGraph` built here, as `write_graph` gets it; the command's test stores two
turns for real (embedded by the local MiniLM).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from matplotlib.text import Text
from strata.memory.graph.export import (
    LABEL_CHARS,
    TITLE_CHARS,
    GraphEdge,
    GraphNode,
    MemoryGraph,
    draw_graph,
    picture_of,
)
from strata.memory.registry import close_all

from strata.api import Memory
from strata.cli import main

# Text between two `$` is math to matplotlib: these raised (the last four) or were drawn in italics.
DOLLARS = [
    "I paid $5 for coffee and $10 for lunch",
    "I spent $5 \\o/ yay, only $6 left",
    "copied $5 from C:\\Users\\ann to $6",
    "the formula is $\\alpha + \\betta$ right",
    "costs $3 for a_b_c and $4",
    "I owe $5^^ and $6",
]


def graph_of(label: str, scope: str = "namespace") -> MemoryGraph:
    nodes = [GraphNode(id="raw:D1:1", kind="raw", label=label), GraphNode(id="raw:D1:2", kind="raw", label="D1:2")]
    return MemoryGraph(namespace="n", scope=scope, nodes=nodes,
                       edges=[GraphEdge(src="raw:D1:1", dst="raw:D1:2", type="temporal")])


@pytest.mark.parametrize("text", DOLLARS)
def test_dollar_signs_in_a_label_or_the_title_are_drawn_as_written(text: str, tmp_path: Path) -> None:
    """Found by audit: `strata graph --question 'Did Lena copy $5 from C:\\Users\\lena to $6?'` ended in a
    matplotlib ParseFatalException; "$5 for coffee and $10" was drawn as math, in italics, its spaces lost."""
    for number, graph in enumerate((graph_of(f"D1:1\n{text}"), graph_of("D1:1", f"question: {text}"))):
        target = tmp_path / f"{number}.png"
        draw_graph(graph, target)
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    texts = [t for t in picture_of(graph_of(text, f"question: {text}")).findobj(Text) if "$" in t.get_text()]
    assert len(texts) == 2  # the label and the title
    assert all(not t.get_parse_math() and not t.get_usetex() for t in texts)


def drawn_quietly(graph: MemoryGraph, target: Path) -> list[str]:
    """The notes `draw_graph` returns, after checking that it let no warning through."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        notes = draw_graph(graph, target)
    assert [str(w.message) for w in caught] == []
    return notes


def test_characters_no_font_has_give_one_note_instead_of_a_warning_each(tmp_path: Path) -> None:
    """Found by audit: one Chinese-and-emoji turn gave 64 lines of matplotlib's "Glyph ... missing from font(s)
    DejaVu Sans" on stderr. Fonts that have them are used when installed; what none has is named in one note."""
    text = "我喜欢在波尔图散步 🎉🍕 東京 ไทย"
    notes = drawn_quietly(graph_of(f"D1:1\n{text}", f"question: {text}"), tmp_path / "cjk.png")
    assert (tmp_path / "cjk.png").stat().st_size > 10_000
    assert len(notes) <= 1  # none when the machine has CJK, emoji and Thai fonts
    if notes:
        assert "drawn as boxes in the picture (" in notes[0] and "\n" not in notes[0]
        assert any(c in notes[0] for c in "我喜🎉ไ")
    assert drawn_quietly(graph_of("D1:1\nI live in Porto"), tmp_path / "plain.png") == []


def test_control_characters_and_a_huge_word_are_drawn_harmlessly_without_warnings(tmp_path: Path) -> None:
    """Found by audit: a bell or an escape code in a turn warned of a missing glyph, and a 39,000-character
    word made matplotlib warn that the layout could not be applied. The picture shows control characters as
    their escapes and cuts a line that would not fit; the JSON and GraphML keep the text whole."""
    control = "bell\x07 escape\x1b[31m red\x1b[0m del\x7f \u202egnp.exe\u202c end"
    assert drawn_quietly(graph_of(f"D1:1\n{control}"), tmp_path / "control.png") == []
    assert drawn_quietly(graph_of("D1:1\n" + "x" * 39_000, "question: " + "y" * 39_000), tmp_path / "long.png") == []
    shown = [t.get_text() for t in picture_of(graph_of(f"D1:1\n{control}", "question: " + "y" * 500)).findobj(Text)]
    label = next(t for t in shown if t.startswith("D1:1"))
    assert label.startswith("D1:1\nbell\\x07 escape\\x1b[31m") and not any(c in label for c in "\x07\x1b\u202e")
    assert len(label.splitlines()[1]) <= LABEL_CHARS
    assert any(t.startswith("n: question: yyy") and len(t) < TITLE_CHARS + 80 for t in shown)


def test_graph_command_says_in_one_line_what_the_picture_could_not_draw(
    data_dir: Path, tmp_path: Path, embedder: object, capsys: pytest.CaptureFixture[str]
) -> None:
    Memory("ann", data_dir=str(data_dir)).add([
        {"speaker": "Ann", "text": "我喜欢在波尔图散步 🎉🍕 and I paid $5 from C:\\Users\\ann to $6",
         "time": "2023-05-01T10:00"},
        {"speaker": "Bob", "text": "Porto is lovely.", "time": "2023-05-01T10:01"}])
    close_all()
    capsys.readouterr()
    base = ["--data-dir", str(data_dir), "--namespace", "ann", "graph", "--out", str(tmp_path / "g")]
    assert main([*base, "--question", "Did Ann copy $5 from C:\\Users\\ann to $6?"]) == 0
    out, err = capsys.readouterr()
    assert "wrote " in out and (tmp_path / "g" / "question.png").is_file()
    assert len(err.splitlines()) <= 1 and all(line.startswith("strata: note: ") for line in err.splitlines())


def test_a_picture_that_fails_leaves_the_earlier_files_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSON and GraphML were renamed in before the PNG was drawn: a PNG that failed left them new beside
    the old picture. Now every file is written first and none replaces its old one unless all were written."""
    from strata.memory.graph import export

    export.write_graph(graph_of("Ann moved to Boston"), tmp_path, "namespace")
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}

    def fails(graph: MemoryGraph, target: Path) -> list[str]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "draw_graph", fails)
    with pytest.raises(OSError):
        export.write_graph(graph_of("Ann moved to Denver"), tmp_path, "namespace")
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before  # no partial file left either

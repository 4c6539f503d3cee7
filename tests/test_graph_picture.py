"""The PNG of `strata graph`: whatever a turn or a question holds is drawn as written, in one clean run.

No memory is needed: the picture is drawn from a `MemoryGraph` built here, as `write_graph` gets it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.text import Text
from strata.memory.graph.export import GraphEdge, GraphNode, MemoryGraph, draw_graph, picture_of

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

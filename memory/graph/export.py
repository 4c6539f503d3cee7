"""The memory graph as files a person or a tool can open: JSON, GraphML and a PNG picture.

A namespace's graph is its records (turns, facts, episodes, persona traits, and
any node that only the links name) joined by the ledger's typed links. The
whole graph of a long conversation has thousands of nodes, which no picture can
show, so the exporter also cuts out a neighbourhood: the evidence a question
reaches with the paths that reached it, or what memory holds about one person.
JSON and GraphML always hold every node and edge of the chosen part; the PNG
draws at most `PICTURE_NODES` of them, the best connected, and says so.
"""

from __future__ import annotations

import json
import re
import stat
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import networkx as nx
from pydantic import BaseModel, Field
from strata.memory.errors import InputError, shown_value
from strata.memory.moments import iso_on_clock
from strata.memory.names import canonical_name
from strata.memory.printable import printable
from strata.memory.private_files import make_private_folder, write_all_beside
from strata.memory.records import ENTITY_NODE, Kind, Record, Status
from strata.memory.store import MemoryStore

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PICTURE_NODES = 60  # more nodes than this make an unreadable picture
LABEL_WORDS = 5  # words of a record's text shown under its id in the picture
LABEL_CHARS = 40  # a label's line longer than this is cut in the picture (not in the JSON or GraphML)
TITLE_CHARS = 160  # the same for the title, which holds a question
PERSON_FACTS = 40  # facts about a person exported, the most recent first
FORMATS = ("json", "graphml", "png")
KIND_COLOURS = {"raw": "#4e79a7", "fact": "#59a14f", "episode": "#f28e2b", "persona": "#b07aa1", "summary": "#8cd17d"}
EDGE_COLOURS = {
    "related": "#e15759", "entity": "#76b7b2", "semantic": "#edc948", "causal": "#ff9da7",
    "temporal": "#bab0ac", "derived_from": "#9c755f", "supersedes": "#000000",
}
OTHER_COLOUR = "#cccccc"


class GraphNode(BaseModel):
    id: str
    kind: str
    label: str = ""
    text: str = ""
    speaker: str = ""
    time: str = ""
    role: str = Field("", description="In a question's neighbourhood: anchor, reached or bridge.")


class GraphEdge(BaseModel):
    src: str
    dst: str
    type: str
    weight: float = 1.0
    on_path: bool = Field(False, description="Taken by the traversal that reached a question's evidence.")


class MemoryGraph(BaseModel):
    """Nodes and typed edges of (part of) one namespace, ready to write."""

    namespace: str
    scope: str = Field(..., description="namespace, question: ..., or person: ...")
    nodes: list[GraphNode]
    edges: list[GraphEdge]

    def to_networkx(self) -> nx.MultiDiGraph:
        graph = nx.MultiDiGraph(namespace=self.namespace, scope=self.scope)
        for node in self.nodes:
            graph.add_node(node.id, **node.model_dump(exclude={"id"}))
        for edge in self.edges:
            graph.add_edge(edge.src, edge.dst, key=edge.type, **edge.model_dump(exclude={"src", "dst"}))
        return graph


def node_of(record: Record, role: str = "") -> GraphNode:
    words = record.text.split()
    short = " ".join(words[:LABEL_WORDS]) + (" ..." if len(words) > LABEL_WORDS else "")
    return GraphNode(
        id=record.id, kind=record.kind, label=f"{record.dialogue_id or record.id}\n{short}", text=record.text,
        speaker=record.speaker, time=iso_on_clock(record.time, record.utc_offset) if record.time else "", role=role,
    )


def build_graph(
    store: MemoryStore, ids: Iterable[str], scope: str, roles: dict[str, str] | None = None,
    path_edges: Iterable[tuple[str, str, str]] = (),
) -> MemoryGraph:
    """The records `ids` and every link among them; nodes a link names that are not records come too
    when they join two of them (an entity node, say)."""
    wanted = list(dict.fromkeys(ids))
    inside = set(wanted)
    roles = roles or {}
    on_path = {(s, d, t) for s, d, t in path_edges} | {(d, s, t) for s, d, t in path_edges}
    links = store.ledger.neighbours(store.namespace, wanted) if wanted else []
    touching: dict[str, set[str]] = {}
    for link in links:
        for here, there in ((link.src, link.dst), (link.dst, link.src)):
            if here in inside and there not in inside:
                touching.setdefault(there, set()).add(here)
    # only an entity node bridges: any other id a link names is a record, shown as one when it is wanted and
    # active, and never as a text-less stand-in (a deleted summary's links outlive it)
    bridges = {other for other, ends in touching.items() if len(ends) >= 2 and other.startswith(ENTITY_NODE)}
    records = {r.id: r for r in store.get(wanted) if r.status == Status.ACTIVE}
    nodes = [node_of(records[i], roles.get(i, "")) for i in wanted if i in records]
    nodes += [GraphNode(id=b, kind=b.split(":", 1)[0], label=b, role="bridge") for b in sorted(bridges)]
    shown = {n.id for n in nodes}
    edges = [
        GraphEdge(src=lk.src, dst=lk.dst, type=lk.type.value, weight=lk.weight,
                  on_path=(lk.src, lk.dst, lk.type.value) in on_path)
        for lk in links if lk.src in shown and lk.dst in shown
    ]
    return MemoryGraph(namespace=store.namespace, scope=scope, nodes=nodes, edges=edges)


def namespace_graph(store: MemoryStore) -> MemoryGraph:
    """Every active record of the namespace and every link among them."""
    ids = [r.id for kind in get_args(Kind) for r in store.all(kind)]
    return build_graph(store, ids, "namespace")


def person_graph(store: MemoryStore, person: str) -> MemoryGraph:
    """What memory holds about one participant: their persona traits, the latest facts about them, and
    the turns those came from."""
    wanted = canonical_name(person)  # any spelling of the name (NFC or NFD, case, no-break spaces)
    people = store.participants()
    if wanted not in {canonical_name(p) for p in people}:
        raise InputError(f"no participant {shown_value(person)} in this memory: choose one of "
                         f"{', '.join(people) or '(none)'}")
    traits = [r for r in store.all("persona") if canonical_name(r.subject or r.speaker) == wanted]
    facts = sorted((r for r in store.all("fact") if canonical_name(r.subject or "") == wanted),
                   key=lambda r: (r.time.timestamp() if r.time else 0.0, r.id), reverse=True)[:PERSON_FACTS]
    turns = [f"raw:{s}" for r in (*traits, *facts) for s in r.source_ids]
    return build_graph(store, [*(r.id for r in traits), *(r.id for r in facts), *turns], f"person: {person}")


def check_formats(formats: Sequence[str]) -> None:
    """Refuse, in one line, a format `write_graph` cannot write (a caller may check before building the graph)."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise InputError(f"unknown graph format(s) {', '.join(unknown)}: use some of {', '.join(FORMATS)}")


def write_graph(graph: MemoryGraph, folder: Path, stem: str, formats: Sequence[str] = FORMATS,
                notes: list[str] | None = None) -> list[Path]:
    """Write the chosen formats into `folder`; returns the files written, and adds to `notes` what the picture
    could not show (`draw_graph`). They hold what people said, so they
    are written as an export is: a new file, and a folder made for them, are this user's only (0600, 0700;
    they were made as the umask says, 0644 under 022), a file replaced keeps its permissions, and each is
    written beside its name and renamed over it (through a link, to the file it names)."""
    check_formats(formats)
    found = [] if notes is None else notes
    writers = {
        "json": lambda path: path.write_text(json.dumps(graph.model_dump(mode="json"), indent=1), encoding="utf-8"),
        "graphml": lambda path: nx.write_graphml(xml_safe(graph).to_networkx(), path),
        "png": lambda path: found.extend(draw_graph(graph, path)),
    }
    make_private_folder(folder)
    targets = {kind: _replaced(folder / f"{stem}.{kind}") for kind in FORMATS if kind in formats}  # all, first
    # all or none: a picture that fails after the JSON and GraphML were renamed in left a new JSON beside an old PNG
    write_all_beside([(real, writers[kind], mode) for kind, (real, mode) in targets.items()])
    return [folder / f"{stem}.{kind}" for kind in targets]


def _replaced(target: Path) -> tuple[Path, int | None]:
    """The file a graph file's name leads to (links followed) and its permission bits when it exists; a
    one-line `InputError` when something else is in its way, before any file is written."""
    try:
        real = target.resolve()
        mode = real.stat().st_mode
    except FileNotFoundError:
        return real, None
    except RuntimeError:  # a loop of links (before Python 3.13)
        raise InputError(f"{target} is a link that leads nowhere: remove it, or name another folder to write the "
                         "graph in") from None
    if not stat.S_ISREG(mode):
        raise InputError(f"{target} is in the way and is not a file (a folder, a pipe or a device): move it, or "
                         "name another folder to write the graph in")
    return real, stat.S_IMODE(mode)


_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")  # outside XML 1.0's Char


def xml_safe(graph: MemoryGraph) -> MemoryGraph:
    """The graph with every character XML 1.0 cannot hold (NUL, other control characters, U+FFFE) written as
    U+FFFD, so the GraphML parses; texts a turn stored with an escape code or a NUL are kept as they are in JSON."""
    def clean(model: BaseModel) -> BaseModel:
        texts = {k: _NOT_XML.sub("\ufffd", v) for k, v in model.__dict__.items() if isinstance(v, str)}
        return model.model_copy(update=texts)

    return graph.model_copy(update={"namespace": _NOT_XML.sub("\ufffd", graph.namespace),
                                    "scope": _NOT_XML.sub("\ufffd", graph.scope),
                                    "nodes": [clean(n) for n in graph.nodes],
                                    "edges": [clean(e) for e in graph.edges]})


def draw_graph(graph: MemoryGraph, target: Path) -> list[str]:
    """A picture: nodes coloured by kind, edges by type, traversal paths drawn thick, a legend. Returns what it
    could not show, as notes of one line (characters no installed font has, drawn as boxes); matplotlib's own
    warnings are not let through (one CJK turn gave 64 lines of them on stderr)."""
    import matplotlib

    with warnings.catch_warnings(record=True) as caught, matplotlib.rc_context({"font.family": _font_families()}):
        warnings.simplefilter("always")
        picture_of(graph).savefig(target, dpi=110, format="png")  # (written under a temporary name)
    missing = list(dict.fromkeys(chr(int(m.group(1))) for w in caught if (m := _MISSING_GLYPH.match(str(w.message)))))
    if not missing:
        return []
    shown = "".join(missing[:12]) + ("..." if len(missing) > 12 else "")
    are = "1 character is" if len(missing) == 1 else f"{len(missing)} characters are"
    return [f"{are} drawn as boxes in the picture ({printable(shown)}): no installed font has them (a CJK or emoji "
            "font such as Noto Sans CJK would); the JSON and GraphML hold them"]


_MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from")
# fonts tried, in turn, for a character the first lacks (matplotlib falls back through the list); only the
# installed ones are named, since matplotlib logs a line for each family it cannot find
_FALLBACK_FONTS = (
    "DejaVu Sans", "Noto Sans", "Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC", "Noto Sans CJK KR",
    "Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback", "Noto Sans Thai",
    "Noto Sans Arabic", "Noto Sans Hebrew", "Noto Sans Devanagari", "Noto Sans Symbols", "Noto Sans Symbols 2",
    "Noto Emoji", "Symbola", "Arial Unicode MS", "Microsoft YaHei", "Yu Gothic", "Malgun Gothic",
    "PingFang SC", "Hiragino Sans", "Apple Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol",
)


def _font_families() -> list[str]:
    from matplotlib import font_manager

    installed = {font.name for font in font_manager.fontManager.ttflist}
    return [name for name in _FALLBACK_FONTS if name in installed] or ["DejaVu Sans"]


def picture_of(graph: MemoryGraph) -> Figure:
    """The figure `draw_graph` writes. Every text in it is drawn as written: matplotlib reads text between two
    `$` as math, which drew "$5 for coffee and $10" in italics and raised on "$5 from C:\\Users to $6"; and it
    is a figure of its own, not pyplot's, so nothing of it stays in the process once it is written. Control
    characters are shown as their escapes and a label's or the title's lines are cut to a width the picture
    can hold (a 39,000-character word made the layout give up)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    full = nx.Graph()
    full.add_nodes_from(n.id for n in graph.nodes)
    full.add_edges_from((e.src, e.dst) for e in graph.edges)
    keep = sorted(full.nodes, key=lambda n: (-full.degree(n), n))[:PICTURE_NODES]
    picture = full.subgraph(keep)
    by_id = {n.id: n for n in graph.nodes}
    layout = nx.spring_layout(picture, seed=7, k=1.6 / max(1, len(keep)) ** 0.5)
    figure = Figure(figsize=(14, 10))
    axes = figure.subplots()
    for edge in graph.edges:
        if edge.src in layout and edge.dst in layout:
            (x1, y1), (x2, y2) = layout[edge.src], layout[edge.dst]
            axes.plot([x1, x2], [y1, y2], color=EDGE_COLOURS.get(edge.type, OTHER_COLOUR),
                      linewidth=3.0 if edge.on_path else 0.8, alpha=0.9 if edge.on_path else 0.5, zorder=1)
    for node_id in keep:
        node = by_id[node_id]
        x, y = layout[node_id]
        edge_colour = "#000000" if node.role == "anchor" else "#ffffff"
        axes.scatter([x], [y], s=260, color=KIND_COLOURS.get(node.kind, OTHER_COLOUR), edgecolors=edge_colour,
                     linewidths=2.0, zorder=2)
        axes.annotate(_drawn(node.label, LABEL_CHARS), (x, y), fontsize=6, ha="center", va="top", xytext=(0, -9),
                      textcoords="offset points", zorder=3, parse_math=False)
    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=k) for k, c in KIND_COLOURS.items()]
    used = sorted({e.type for e in graph.edges})
    handles += [Line2D([], [], color=EDGE_COLOURS.get(t, OTHER_COLOUR), label=t) for t in used]
    legend = axes.legend(handles=handles, loc="upper right", fontsize=8)
    for text in legend.get_texts():
        text.set_parse_math(False)
    note = "" if len(keep) == len(full) else f" - the {len(keep)} best connected of {len(full)} nodes"
    axes.set_title(_drawn(f"{graph.namespace}: {graph.scope}", TITLE_CHARS)
                   + f"{note} (black ring: anchor, thick edge: traversal path)",
                   fontsize=10, parse_math=False)
    axes.set_axis_off()
    figure.tight_layout()
    return figure


def _drawn(text: str, width: int) -> str:
    """`text` as the picture shows it: control characters as escapes (`printable`), each line cut to `width`."""
    return "\n".join(line if len(line) <= width else line[: width - 3] + "..."
                     for line in printable(text).splitlines())

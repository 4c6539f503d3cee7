"""The recall-against-budget harness: ingests cached per write-side switch set, leave-conversations-out.

Memory is real (the first two sessions of LoCoMo conv-26, ingested and
consolidated offline); the rotation is checked on rows whose best value differs
between conversations, so choosing on three and scoring on two shows a gap.
"""

from __future__ import annotations

from pathlib import Path

from strata.evaluation.curve import Row, Run, ingest_set, leave_out, parse

from strata.conversations import load_turns


def test_a_write_side_ablation_is_ingested_apart_and_only_once(
    tmp_path: Path, locomo_dir: Path, embedder: object
) -> None:
    loaded = load_turns(locomo_dir / "conv-26.json")
    small = loaded.model_copy(update={"sessions": loaded.sessions[:2]})
    run = Run(tmp_path / "out", str(tmp_path / "cache"))
    full = run.memory(small)
    ready = run.memory_dir("conv-26") / "ready.json"
    assert ready.is_file() and run.memory_dir("conv-26") == tmp_path / "cache" / "all" / "conv-26"
    assert full.store.count("raw") == small.turn_count() and full.store.count("summary") > 0
    stamp = ready.stat().st_mtime_ns
    again = run.memory(small, token_budget=700)
    assert ready.stat().st_mtime_ns == stamp and again.context("retrieve").token_budget == 700
    ablated = run.memory(small, frozenset({"summaries"}), summaries=False)  # as the ablation row asks for it
    assert run.memory_dir("conv-26", frozenset({"summaries"})) == tmp_path / "cache" / "no-summaries" / "conv-26"
    assert ablated.store.count("raw") == small.turn_count() and ablated.store.count("summary") == 0
    assert ingest_set(frozenset({"summaries", "causal_links"})) == "no-causal_links+summaries"


def row(conversation: str, value: str, recall: float) -> Row:
    return Row(system="strata", setting=f"m.X={value}", conversation=conversation, index=0, category=1,
               recall=recall, lenient=recall, tokens=100, ms=1.0)


def test_leave_conversations_out_chooses_on_three_and_scores_on_two() -> None:
    # value 1 is best on a, b, c; value 2 only on d and e
    table = {"a": (0.9, 0.5), "b": (0.9, 0.5), "c": (0.9, 0.5), "d": (0.4, 0.8), "e": (0.4, 0.8)}
    rows = [row(c, v, r) for c, scores in table.items() for v, r in zip(("1", "2"), scores, strict=True)]
    rotations = leave_out(rows, sorted(table))
    assert [r["held_out"] for r in rotations] == [["a", "b"], ["b", "c"], ["c", "d"], ["d", "e"], ["a", "e"]]
    held_de = next(r for r in rotations if r["held_out"] == ["d", "e"])
    assert held_de["chosen"] == "1" and held_de["tune_recall"] == 0.9 and held_de["held_out_recall"] == 0.4
    held_ab = next(r for r in rotations if r["held_out"] == ["a", "b"])
    assert held_ab["chosen"] == "2" and abs(held_ab["tune_recall"] - (0.5 + 0.8 + 0.8) / 3) < 1e-9


def test_leave_out_scores_the_codes_value_on_the_same_held_out_conversations() -> None:
    """The gap of recall where tuned and held out mostly says which conversations are harder: with one value,
    nothing to overfit, it was -0.029 to +0.051 per rotation. The gain compares the chosen value with the code's
    on the same held-out pair; ties go to the code's value, then to the smaller one ('8' beat 4 and 16 as text)."""
    table = {"a": (0.9, 0.5), "b": (0.9, 0.5), "c": (0.9, 0.5), "d": (0.4, 0.8), "e": (0.4, 0.8)}
    rows = [row(c, v, r) for c, scores in table.items() for v, r in zip(("1", "2"), scores, strict=True)]
    held_de = next(r for r in leave_out(rows, sorted(table), {"m.X": "2"}) if r["held_out"] == ["d", "e"])
    assert (held_de["chosen"], held_de["code_held_out_recall"]) == ("1", 0.8)
    assert abs(held_de["gain"] - (0.4 - 0.8)) < 1e-9  # chosen where it fits, it loses where it was not chosen
    same = [row(c, v, 0.7) for c in table for v in ("4", "8", "16")]
    assert {r["chosen"] for r in leave_out(same, sorted(table), {"m.X": "16"})} == {"16"}
    assert {r["chosen"] for r in leave_out(same, sorted(table))} == {"4"}
    assert {r["gain"] for r in leave_out(same, sorted(table), {"m.X": "8"})} == {0.0}


def test_the_command_line_rejects_an_unknown_ablation(locomo_dir: Path, capsys: object) -> None:
    import pytest

    with pytest.raises(SystemExit):
        parse([str(locomo_dir / "conv-26.json"), "--out", "x", "--ablations", "entity_graph,colour"])
    assert "--ablations colour" in capsys.readouterr().err  # type: ignore[attr-defined]
    args = parse([str(locomo_dir / "conv-26.json"), "--out", "x", "--ablations", "summaries,judge_filter"])
    assert args.ablations == {"summaries", "judge_filter"}


def test_the_command_line_rejects_a_constant_it_cannot_tune(locomo_dir: Path, capsys: object) -> None:
    import pytest

    conversation = str(locomo_dir / "conv-26.json")
    for spec, said in [
        ("strata.agents.research.NO_SUCH=1,2", "has no constant NO_SUCH"),
        ("strata.agents.nowhere.ANCHORS=1", "no module strata.agents.nowhere"),
        ("strata.memory.search.ANCHORS=five", "give numbers"),
        ("strata.memory.search.ANCHORS=5,7.5", "ANCHORS is a whole number"),  # it ran as 7, labelled 7.5
    ]:
        with pytest.raises(SystemExit):
            parse([conversation, "--out", "x", "--tune", spec])
        assert said in capsys.readouterr().err  # type: ignore[attr-defined]
    assert parse([conversation, "--out", "x", "--tune", "strata.memory.search.ANCHORS=5,10"]).tune


def test_a_memory_folder_another_process_holds_is_a_one_line_error(
    locomo_dir: Path, tmp_path: Path, capsys: object, monkeypatch: object
) -> None:
    """Two runs sharing one ingest cache: the second says what to do instead of a traceback."""
    import fcntl
    import os

    from strata.evaluation.curve import main

    folder = tmp_path / "cache" / "all" / "conv-26"
    folder.mkdir(parents=True)
    holder = os.open(folder / "chroma.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as another run would hold it
    monkeypatch.setenv("STRATA_LOCK_WAIT", "0")  # type: ignore[attr-defined]
    try:
        code = main([str(locomo_dir / "conv-26.json"), "--out", str(tmp_path / "out"),
                     "--ingest-cache", str(tmp_path / "cache"), "--questions", "1", "--ablations", "none"])
    finally:
        os.close(holder)
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert code == 2
    assert "in use by another process" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_baselines_show_turns_as_strata_does_and_tokens_are_those_the_answerer_reads(
    tmp_path: Path, locomo_dir: Path, embedder: object
) -> None:
    """The baselines' turns kept their small talk, strata's did not (the hybrid's recall at 1,500 tokens was
    0.792 where the same lines give 0.798); tokens were a sum over lines, about 55 a question more than the
    joined text the Working role reads."""
    from strata.agents.budget import chronological
    from strata.agents.common import format_evidence
    from strata.evaluation.baselines import TurnIndex
    from strata.evaluation.curve import baseline_retriever, tokens_of
    from strata.evaluation.systems import RunSettings
    from strata.evaluation.tokens import count_tokens

    loaded = load_turns(locomo_dir / "conv-26.json")
    index = TurnIndex(RunSettings(data_dir=str(tmp_path / "mem")))
    index.ensure(loaded.model_copy(update={"sessions": loaded.sessions[:2]}), "baselines")
    [thanks] = [e for e in index.lexical("painting express feelings creative", 30) if e.dialogue_id == "D1:16"]
    assert "Painting's a fun way" in thanks.line and "Thanks, Caroline" not in thanks.line
    shown = baseline_retriever(index, "hybrid", 400)("What does Melanie paint?")
    assert tokens_of(shown) == count_tokens(format_evidence(chronological(shown))) and tokens_of([]) == 0


def test_an_error_naming_a_file_shows_its_control_characters_as_escapes(tmp_path: Path, capsys: object) -> None:
    """The error was printed as it came: a file named with ESC [2J cleared the screen of whoever ran the curve."""
    from strata.evaluation.curve import main

    broken = tmp_path / "conv\x1b[2J.json"
    broken.write_text("{", encoding="utf-8")
    assert main([str(broken), "--out", str(tmp_path / "out"), "--ingest-cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "\x1b" not in err and "conv\\x1b[2J.json" in err

"""The evaluation harness end to end on a real LoCoMo conversation cut down to two sessions.

The cut-down file keeps conv-26's first two sessions and six of its questions
whose gold evidence lies in them (categories 1, 2, 4 and 5), so every system
runs for real (Chroma, MiniLM, the graph, offline) in a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from strata.evaluation.harness import main
from strata.evaluation.judge_llm import AnswerJudge
from strata.evaluation.systems import ALL_SYSTEMS
from strata.evaluation.usage import track_usage
from strata.memory.registry import close_all

LOCOMO = Path("/work/shared/data/locomo/conv-26.json")
QUESTIONS = (
    "When did Caroline go to the LGBTQ support group?",  # 2, D1:3
    "What is Caroline's identity?",  # 1, D1:5
    "What did the charity race raise awareness for?",  # 4, D2:2
    "What type of individuals does the adoption agency Caroline is considering support?",  # 4, D2:12
    "When is Melanie planning on going camping?",  # 2, D2:7
    "What did Caroline realize after her charity race?",  # 5, D2:3
)


def _cut_down(tmp_path: Path) -> Path:
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    keep = {key: data[key] for key in ("speaker_a", "speaker_b", "session_1", "session_2",
                                       "session_1_date_time", "session_2_date_time")}
    keep["qa"] = [q for q in data["qa"] if q["question"] in QUESTIONS]
    assert len(keep["qa"]) == len(QUESTIONS)
    path = tmp_path / "conv-26-two-sessions.json"
    path.write_text(json.dumps(keep), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _close_stores() -> Any:
    yield
    close_all()


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "questions.jsonl").read_text(encoding="utf-8").splitlines()]


def test_end_to_end_run_writes_every_output_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = _cut_down(tmp_path)
    out = tmp_path / "run"
    assert main([str(file), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "| strata |" in printed and "| bm25 |" in printed

    for name in ("results.json", "questions.jsonl", "table.md", "recall_vs_tokens.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "recall_vs_tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    report = json.loads((out / "results.json").read_text(encoding="utf-8"))
    config = report["config"]
    assert config["model"] == "offline" and config["judge_model"] is None
    assert config["files"][0]["sha256"] and len(config["files"][0]["sha256"]) == 64
    assert config["versions"]["chromadb"] != "not installed"
    assert report["totals"] == {**report["totals"], "conversations": 1, "turns": 35, "questions": 6, "answerable": 5}

    rows = _rows(out)
    assert len(rows) == len(QUESTIONS) * len(ALL_SYSTEMS)
    figures = {f["system"]: f for f in report["systems"]}
    assert list(figures) == list(ALL_SYSTEMS)
    for name, f in figures.items():
        overall = f["overall"]
        assert overall["questions"] == 5 and f["adversarial"]["questions"] == 1, name
        assert 0.0 <= overall["evidence_recall"] <= 1.0, name
        assert 0.0 <= overall["full_coverage"] <= 1.0, name
        assert 0.0 <= overall["f1"] <= 1.0 and 0.0 <= overall["bleu1"] <= 1.0, name
        assert overall["judge"] is None, name  # offline: no judge score is invented
        assert f["cost"]["model_calls_per_question"] == 0 and f["cost"]["model_calls_per_turn"] == 0, name
        assert f["cost"]["latency_ms_p50"] <= f["cost"]["latency_ms_p95"], name

    # the whole conversation is in the full context: every gold turn is reached, at ratio 1
    full = figures["full-context"]["overall"]
    assert full["evidence_recall"] == 1.0 and full["full_coverage"] == 1.0
    assert full["token_ratio_to_full"] == pytest.approx(1.0)
    assert figures["dense-rag"]["overall"]["context_tokens"] < full["context_tokens"]
    # retrieval-only ablations reuse strata's ingest; no-refresher has its own
    assert figures["k_r=1"]["cost"]["ingest_shared_with"] == "strata"
    assert figures["no-refresher"]["cost"]["ingest_shared_with"] is None
    assert figures["bm25"]["cost"]["ingest_shared_with"] == "full-context"

    # each row is auditable: recall follows from the gold and the retrieved ids
    for row in rows:
        if row["gold_evidence"]:
            reached = [g for g in row["gold_evidence"] if g in row["retrieved_ids"]]
            assert row["recall"] == pytest.approx(len(reached) / len(row["gold_evidence"]))
        assert row["context_tokens"] >= 0 and row["latency_ms"] > 0
        assert (row["f1"] is None) == (row["category"] == 5)
    dense_rows = [r for r in rows if r["system"] == "dense-rag"]
    assert all(len(r["context_ids"]) == 10 for r in dense_rows)

    # a second run reuses the finished conversation instead of redoing it
    cache = next((out / "conversations").glob("*.json"))
    before = cache.stat().st_mtime_ns
    assert main([str(file), "--out", str(out), "--quiet"]) == 0
    again = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert again["config"]["reused_conversations"] == ["conv-26-two-sessions"]
    assert cache.stat().st_mtime_ns == before
    assert _rows(out) == rows


def test_a_different_configuration_is_not_served_from_the_cache(tmp_path: Path) -> None:
    file = _cut_down(tmp_path)
    out = tmp_path / "run"
    assert main([str(file), "--out", str(out), "--quiet", "--systems", "bm25", "--questions", "2"]) == 0
    assert main([str(file), "--out", str(out), "--quiet", "--systems", "bm25,dense-rag", "--questions", "2"]) == 0
    report = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert report["config"]["reused_conversations"] == []
    assert {f["system"] for f in report["systems"]} == {"dense-rag", "bm25"}
    assert len(_rows(out)) == 4


def test_malformed_file_gives_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"speaker_a": "Ann", "speaker_b": "Bo", "session_1": [{"speaker": "Ann"', encoding="utf-8")
    assert main([str(broken), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and "not valid JSON" in error and "\n" not in error
    assert "Traceback" not in error
    assert not (tmp_path / "run" / "results.json").exists()


def test_an_error_naming_a_file_shows_its_control_characters_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error was printed as it came: a file named with ESC [2J cleared the screen of whoever ran the harness."""
    broken = tmp_path / "conv\x1b[2J.json"
    broken.write_text("{", encoding="utf-8")
    assert main([str(broken), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert "\x1b" not in error and "conv\\x1b[2J.json" in error


def test_file_without_questions_and_unknown_system_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps([{"speaker": "Ann", "text": "I moved to Lisbon."}]), encoding="utf-8")
    assert main([str(turns), "--out", str(tmp_path / "a"), "--quiet"]) == 2
    assert "no LoCoMo questions" in capsys.readouterr().err
    assert main([str(_cut_down(tmp_path)), "--out", str(tmp_path / "b"), "--systems", "mem0", "--quiet"]) == 2
    assert "unknown system(s) mem0" in capsys.readouterr().err


def test_judge_labels_and_counts_its_calls() -> None:
    model = FakeListChatModel(responses=[
        'Sure: {"reason": "same date, other format", "label": "CORRECT"}',
        "```json\n{\"reason\": \"another person\", \"label\": \"WRONG\"}\n```",
        "I cannot grade this.",
    ])
    judge = AnswerJudge("fake:judge", chat_model_object=model)
    assert judge.grade("When did Caroline go to the support group?", "7 May 2023", "May 7th, 2023") == "CORRECT"
    assert judge.grade("What is Caroline's identity?", "Transgender woman", "Melanie is a painter") == "WRONG"
    assert judge.grade("Q?", "A", "B") is None
    assert judge.unreadable == 1
    assert judge.usage.calls == 3 and judge.usage.estimated_calls == 3 and judge.usage.input_tokens > 0


def test_usage_tally_sees_calls_inside_the_block_only() -> None:
    model = FakeListChatModel(responses=["one", "two"])
    model.invoke("outside")
    with track_usage() as tally:
        model.invoke("inside the block")
    assert tally.usage.calls == 1 and tally.usage.output_tokens > 0

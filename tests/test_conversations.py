"""Conversation files: the five real LoCoMo files, the other shapes, every bad input.

The central check is that ingestion never reads a gold annotation: the parsed
JSON is replaced by objects that log every key whose value is read, and whose
real dict storage is empty, so a loader that copied or validated a whole
object behind their back would see no data at all and fail the counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from strata import conversations
from strata.conversations import (
    ConversationFileError,
    load_conversations,
    load_questions,
    load_turns,
)

# file -> (sessions, turns, questions, questions per category 1..5), from the data README
EXPECTED = {
    "conv-26": (19, 419, 199, (32, 37, 13, 70, 47)),
    "conv-30": (19, 369, 105, (11, 26, 0, 44, 24)),
    "conv-41": (32, 663, 193, (31, 27, 8, 86, 41)),
    "conv-42": (29, 629, 260, (37, 40, 11, 111, 61)),
    "conv-43": (29, 680, 242, (31, 26, 14, 107, 64)),
}
# gold annotations at any level: LoCoMo's per-conversation keys, locomo10's sample keys, qa fields
GOLD = re.compile(
    r"qa|events_.*|.*_observation|.*_summary|event_summary|observation|answer|adversarial_answer|evidence|category"
)
# everything ingestion may read: speakers, sessions and their date_times, ids, and per turn dia_id/text/caption
ALLOWED = re.compile(
    r"speaker_a|speaker_b|session_\d+|session_\d+_date_time|sample_id|conversation|speaker|dia_id|text|blip_caption"
)


# --- a JSON object that logs which keys are read --------------------------------------------


class RecordingDict(dict):  # type: ignore[type-arg]
    """A dict whose contents are reachable only through methods that log the keys read.

    The real dict storage stays empty: `dict(x)`, `{**x}`, json.dumps or pydantic
    validating `x` directly would all find nothing, so the loader cannot take a
    shortcut past the log and still produce the right turns.
    """

    def __init__(self, pairs: list[tuple[str, Any]], log: list[str]) -> None:
        super().__init__()
        self._data = dict(pairs)
        self._log = log

    def __getitem__(self, key: str) -> Any:
        self._log.append(key)
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        self._log.append(key)
        return self._data.get(key, default)

    def values(self) -> Any:
        self._log.extend(self._data)
        return self._data.values()

    def items(self) -> Any:
        self._log.extend(self._data)
        return self._data.items()

    def pop(self, key: str, *default: Any) -> Any:
        self._log.append(key)
        return self._data.pop(key, *default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._log.append(key)
        return self._data.setdefault(key, default)

    def copy(self) -> dict[str, Any]:
        self._log.extend(self._data)
        return dict(self._data)

    def __contains__(self, key: object) -> bool:  # asking whether a key exists reads no value
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def keys(self) -> Any:
        return self._data.keys()

    def __len__(self) -> int:
        return len(self._data)


def _recording_json(log: list[str]) -> SimpleNamespace:
    """Stands in for the `json` module inside strata.conversations."""

    def loads(text: str | bytes, **kwargs: Any) -> Any:
        return json.loads(text, object_pairs_hook=lambda pairs: RecordingDict(pairs, log), **kwargs)

    def load(handle: Any, **kwargs: Any) -> Any:
        return loads(handle.read(), **kwargs)

    return SimpleNamespace(loads=loads, load=load, JSONDecodeError=json.JSONDecodeError)


@pytest.fixture
def read_keys(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    log: list[str] = []
    monkeypatch.setattr(conversations, "json", _recording_json(log))
    return log


def _benchmark_file(locomo_dir: Path, tmp_path: Path) -> Path:
    """The five files rewritten in the locomo10.json layout: a list of samples."""
    samples = []
    for stem in EXPECTED:
        raw = json.loads((locomo_dir / f"{stem}.json").read_text())
        samples.append(
            {
                "sample_id": stem,
                "conversation": {k: v for k, v in raw.items() if ALLOWED.fullmatch(k)},
                "qa": raw["qa"],
                "event_summary": {k: v for k, v in raw.items() if k.startswith("events_")},
                "observation": {k: v for k, v in raw.items() if k.endswith("_observation")},
                "session_summary": {k: v for k, v in raw.items() if k.endswith("_summary")},
            }
        )
    path = tmp_path / "locomo5.json"
    path.write_text(json.dumps(samples))
    return path


# --- ingestion never reads gold annotations ------------------------------------------------


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_ingestion_reads_only_allowed_keys(stem: str, locomo_dir: Path, read_keys: list[str]) -> None:
    loaded = load_turns(locomo_dir / f"{stem}.json")
    assert loaded.turn_count() == EXPECTED[stem][1]  # the data really came through the log
    assert read_keys, "the recording JSON was not used"
    assert not [key for key in read_keys if GOLD.fullmatch(key)]
    assert {key for key in read_keys if not ALLOWED.fullmatch(key)} == set()


def test_benchmark_layout_reads_only_allowed_keys(locomo_dir: Path, tmp_path: Path, read_keys: list[str]) -> None:
    loaded = load_conversations(_benchmark_file(locomo_dir, tmp_path))
    assert [c.conversation_id for c in loaded] == list(EXPECTED)
    assert [c.turn_count() for c in loaded] == [v[1] for v in EXPECTED.values()]
    assert not [key for key in read_keys if GOLD.fullmatch(key)]
    assert {key for key in read_keys if not ALLOWED.fullmatch(key)} == set()


def test_the_recorder_does_see_gold_reads(locomo_dir: Path, read_keys: list[str]) -> None:
    """Control: reading questions is logged, so the empty checks above mean something."""
    questions = load_questions(locomo_dir / "conv-30.json")
    assert len(questions) == 105
    assert "qa" in read_keys and "answer" in read_keys and "adversarial_answer" in read_keys


# --- the five real files ----------------------------------------------------------------------


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_real_files_match_the_readme(stem: str, locomo_dir: Path) -> None:
    sessions, turns, questions, per_category = EXPECTED[stem]
    loaded = load_turns(locomo_dir / f"{stem}.json")
    assert loaded.conversation_id == stem
    assert len(loaded.sessions) == sessions
    assert loaded.turn_count() == turns
    assert len(list(loaded.turns())) == turns
    assert len(loaded.participants) == 2
    all_turns = list(loaded.turns())
    assert all(t.time is not None for t in all_turns)
    assert all(t.listener in loaded.participants and t.listener != t.speaker for t in all_turns)
    assert all(t.session_label() == t.session for t in all_turns)  # dia_id D<s>:<t> agrees with the session
    times = [s.time for s in loaded.sessions]
    assert times == sorted(times)  # sessions come in date order
    dia_ids = [t.dia_id for t in all_turns]
    assert len(set(dia_ids)) == len(dia_ids)

    gold = load_questions(locomo_dir / f"{stem}.json")
    assert len(gold) == questions
    assert tuple(sum(q.category == c for q in gold) for c in range(1, 6)) == per_category
    assert all(q.conversation_id == stem for q in gold)
    # every gold id names a real turn, except one slip in the benchmark itself
    unknown = {e for q in gold for e in q.evidence} - set(dia_ids)
    assert unknown == ({"D10:19"} if stem == "conv-42" else set())


def test_conv26_first_turns_and_dates(locomo_dir: Path) -> None:
    loaded = load_turns(locomo_dir / "conv-26.json")
    assert loaded.participants == ["Caroline", "Melanie"]
    first = next(loaded.turns())
    assert (first.speaker, first.listener, first.dia_id, first.session) == ("Caroline", "Melanie", "D1:1", "1")
    assert first.text == "Hey Mel! Good to see you! How have you been?"
    assert first.time == datetime(2023, 5, 8, 13, 56)  # "1:56 pm on 8 May, 2023"
    assert loaded.sessions[-1].label == "19"
    assert loaded.sessions[-1].time == datetime(2023, 10, 22, 9, 55)  # "9:55 am on 22 October, 2023"
    # session_20.._35 have date_times but no turns: they are skipped
    assert [s.label for s in loaded.sessions] == [str(n) for n in range(1, 20)]
    captioned = [t for t in loaded.turns() if t.image_caption]
    assert len(captioned) == 116
    assert captioned[0].image_caption  # blip_caption carried over


def test_questions_handle_ints_adversarial_and_evidence_slips(locomo_dir: Path) -> None:
    gold = load_questions(locomo_dir / "conv-26.json")
    # six answers are JSON numbers (years, counts); they arrive as text
    assert all(isinstance(q.answer, str) and q.answer for q in gold)
    assert any(q.answer.isdigit() for q in gold)
    adversarial = [q for q in gold if q.category == 5]
    assert len(adversarial) == 47 and all(q.adversarial for q in adversarial)
    assert not any(q.adversarial for q in gold if q.category != 5)
    bowl = next(q for q in adversarial if q.question.startswith("Did Caroline make the black and white bowl"))
    assert bowl.answer == "Yes"  # the adversarial_answer, not the 'answer' key
    # "D8:6; D9:17" is two ids
    assert any(q.evidence == ["D8:6", "D9:17"] for q in gold)
    # a question without gold evidence keeps an empty list
    assert any(q.evidence == [] for q in gold)
    # conv-43's "D:11:26" is repaired, conv-42's lone "D" dropped
    assert any("D11:26" in q.evidence for q in load_questions(locomo_dir / "conv-43.json"))
    assert all(re.fullmatch(r"D\d+:\d+", e) for q in load_questions(locomo_dir / "conv-42.json") for e in q.evidence)


def test_benchmark_layout_questions(locomo_dir: Path, tmp_path: Path) -> None:
    path = _benchmark_file(locomo_dir, tmp_path)
    gold = load_questions(path)
    assert len(gold) == sum(v[2] for v in EXPECTED.values())
    assert {q.conversation_id for q in gold} == set(EXPECTED)
    with pytest.raises(ConversationFileError, match=r"holds 5 conversations.*load_conversations"):
        load_turns(path)


def test_single_sample_object(locomo_dir: Path, tmp_path: Path) -> None:
    raw = json.loads((locomo_dir / "conv-30.json").read_text())
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"sample_id": "conv-30", "conversation": raw, "qa": raw["qa"]}))
    assert load_turns(path).conversation_id == "conv-30"
    assert load_turns(path).turn_count() == 369


# --- plain turn lists -------------------------------------------------------------------------


def _write(tmp_path: Path, content: Any, name: str = "chat.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_plain_turns(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"speaker": "Ann", "text": "I adopted a cat.", "time": "2024-03-01T10:00", "dia_id": "D1:1"},
            {"speaker": "Bo", "text": "What is its name?", "time": "2024-03-01T10:01", "dia_id": "D1:2"},
            {"speaker": "Ann", "text": "Miso.", "dia_id": "D1:3", "image_caption": "a grey cat on a sofa"},
            {"speaker": "Bo", "text": "How is Miso?", "time": "2024-04-02T09:00", "session": 2, "note": "ignored"},
        ],
    )
    loaded = load_turns(path)
    assert loaded.conversation_id == "chat"
    assert loaded.participants == ["Ann", "Bo"]
    assert [s.label for s in loaded.sessions] == ["1", "2"]
    assert loaded.sessions[0].time == datetime(2024, 3, 1, 10, 0)
    turns = list(loaded.turns())
    assert [t.listener for t in turns] == ["Bo", "Ann", "Bo", "Ann"]
    assert turns[2].image_caption == "a grey cat on a sofa"
    assert turns[2].time is None
    assert turns[3].session == "2" and turns[3].dia_id is None
    assert turns[3].time == datetime(2024, 4, 2, 9, 0)


def test_plain_turns_group_and_listener(tmp_path: Path) -> None:
    # one speaker: nobody to address; three speakers: no single listener
    alone = load_turns(_write(tmp_path, [{"speaker": "user", "text": "Note to self: buy milk."}], "a.json"))
    assert next(alone.turns()).listener is None
    assert alone.sessions[0].label == "1"
    group = load_turns(_write(tmp_path, [{"speaker": s, "text": f"hi from {s}"} for s in ("A", "B", "C")], "g.json"))
    assert group.participants == ["A", "B", "C"]
    assert all(t.listener is None for t in group.turns())


def test_plain_turns_read_only_their_fields(read_keys: list[str], tmp_path: Path) -> None:
    path = _write(tmp_path, [{"speaker": "Ann", "text": "hello", "secret": "x"}])
    assert load_turns(path).turn_count() == 1
    assert "secret" not in read_keys


# --- bad input: one line each, saying what to do ------------------------------------------------


def _error(path: Path | str) -> str:
    with pytest.raises(ConversationFileError) as caught:
        load_turns(path)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    assert ": " in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    message = _error(tmp_path / "nope.json")
    assert "no such file" in message and "check the path" in message


def test_directory_given(tmp_path: Path) -> None:
    assert "is a folder" in _error(tmp_path)


def test_not_json(tmp_path: Path) -> None:
    path = _write(tmp_path, '[\n  {"speaker": "Ann",\n    "text": oops}\n]', "conv.json")
    message = _error(path)
    assert message.endswith("not valid JSON at line 3 column 13: fix the file or export it again")
    assert message.startswith(str(path))


def test_empty_file(tmp_path: Path) -> None:
    assert "is empty" in _error(_write(tmp_path, "  \n"))


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes('[{"speaker": "Zoë", "text": "hé"}]'.encode("latin-1"))
    assert "not UTF-8" in _error(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("42", "holds a number"),
        ('"hello"', "holds a string"),
        ("null", "holds null"),
        ("{}", "unknown shape"),
        ('{"turns": []}', "unknown shape"),
        ("[]", "empty list"),
        ("[1, 2]", "turn 1 is a number, not an object"),
        ('[{"conversation": {"speaker_a": "A"}}, {"text": "x"}]', "item 2 has no 'conversation'"),
        ('[{"conversation": [1]}]', "not a LoCoMo conversation"),
    ],
)
def test_wrong_shapes(tmp_path: Path, content: str, expected: str) -> None:
    assert expected in _error(_write(tmp_path, content))


@pytest.mark.parametrize(
    ("turn", "expected"),
    [
        ({"speaker": "Ann"}, "turn 2 has no text: every turn needs 'speaker' and 'text'"),
        ({"speaker": "Ann", "text": None}, "turn 2 has no text"),
        ({"speaker": "Ann", "text": "   "}, "turn 2 has empty text"),
        ({"text": "hello"}, "turn 2 has no speaker"),
        ({"speaker": "", "text": "hello"}, "turn 2 has an empty speaker"),
        ({"speaker": ["Ann", "Bo"], "text": "hello"}, "turn 2 has a speaker that is a list: write the speaker"),
        ({"speaker": 7, "text": "hello"}, "turn 2 has a speaker that is a number"),
        ({"speaker": {"name": "Ann"}, "text": "hello"}, "turn 2 has a speaker that is an object"),
        ({"speaker": "Ann", "text": 3}, "turn 2 has a text that is a number"),
        ({"speaker": "Ann", "text": "hi", "time": "next tuesday-ish"}, "turn 2 time 'next tuesday-ish' is not a date"),
        ({"speaker": "Ann", "text": "hi", "image_caption": 5}, "image_caption that is a number"),
        ({"speaker": "Ann", "text": "hi", "dia_id": "D1:1"}, "dia_id 'D1:1' is used by more than one turn"),
        ({"speaker": "Ann", "text": "\u200b\u200b"}, "turn 2 has empty text"),
        ({"speaker": "Ann", "text": "\u034f"}, "turn 2 has empty text"),  # a combining mark alone: no words either
        ({"speaker": "Ann", "text": "a\x00b"}, "turn 2 has a text that holds a NUL character (\\x00) at character 2"),
        ({"speaker": "Ann", "text": "hi", "dia_id": "D1:\x002"}, "turn 2 has a dia_id that holds a NUL"),
        ({"speaker": "Ann", "text": "hi", "session": "\x00"}, "turn 2 has a session that holds a NUL"),
        ({"speaker": "Ann", "text": "hi", "image_caption": "a\x00"}, "turn 2 has a image_caption that holds a NUL"),
    ],
)
def test_bad_plain_turns(tmp_path: Path, turn: dict[str, Any], expected: str) -> None:
    path = _write(tmp_path, [{"speaker": "Bo", "text": "fine", "dia_id": "D1:1"}, turn])
    message = _error(path)
    assert message.startswith(f"{path}: ")
    assert expected in message


def _locomo(session_1: Any, **extra: Any) -> dict[str, Any]:
    return {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": session_1,
        **extra,
    }


@pytest.mark.parametrize(
    ("conversation", "expected"),
    [
        (
            _locomo([{"speaker": "Ann", "dia_id": "D1:1", "text": "hi"}, {"speaker": "Bo", "dia_id": "D1:2"}]),
            "session_1 turn 2 has no text: every turn needs 'speaker' and 'text'",
        ),
        (_locomo([{"speaker": "Ann", "dia_id": "D1:1", "text": ""}]), "session_1 turn 1 has empty text"),
        (_locomo([{"speaker": 1, "dia_id": "D1:1", "text": "hi"}]), "session_1 turn 1 has a speaker that is a number"),
        (_locomo([{"speaker": "Cy", "dia_id": "D1:1", "text": "hi"}]), "is by 'Cy', who is neither speaker_a"),
        (_locomo([{"speaker": "Ann", "dia_id": 11, "text": "hi"}]), "has a dia_id that is a number"),
        (_locomo({"speaker": "Ann"}), "session_1 is an object: make it a list of turns"),
        (_locomo([]), "has no session with turns"),
        ({"speaker_a": "Ann", "speaker_b": None, "session_1": []}, "speaker_b is missing"),
        ({"speaker_a": ["Ann"], "speaker_b": "Bo"}, "speaker_a is a list"),
        (
            {**_locomo([{"speaker": "Ann", "text": "hi"}]), "session_1_date_time": "someday"},
            "session_1_date_time 'someday' is not a date",
        ),
        (
            {**_locomo([{"speaker": "Ann", "text": "hi"}]), "session_1_date_time": 20230508},
            "session_1_date_time is a number",
        ),
        (_locomo([{"speaker": "Ann", "dia_id": "D1:1", "text": "a\x00b"}]), "turn 1 has a text that holds a NUL"),
        (_locomo([{"speaker": "Ann", "dia_id": "D1:\x001", "text": "hi"}]), "turn 1 has a dia_id that holds a NUL"),
        (
            _locomo([{"speaker": "Ann", "text": "hi", "blip_caption": "a\x00 dog"}]),
            "session_1 turn 1 has a blip_caption that holds a NUL",
        ),
        ({**_locomo([{"speaker": "Ann", "text": "hi"}]), "speaker_b": "B\x00o"}, "speaker_b holds a NUL"),
    ],
)
def test_bad_locomo_files(tmp_path: Path, conversation: dict[str, Any], expected: str) -> None:
    assert expected in _error(_write(tmp_path, conversation, "conv.json"))


def test_locomo_edge_cases_that_load(tmp_path: Path) -> None:
    conversation = _locomo(
        [{"speaker": "Ann", "text": "hi", "img_url": ["http://x"], "query": "cat", "re-download": True}],
        session_2=[],
        session_2_date_time="not a date, but its session is empty so it is never read",
        session_3=[{"speaker": "Bo", "dia_id": "D3:1", "text": "later", "blip_caption": "a photo of a dog"}],
        sample_id="mine",
    )
    loaded = load_turns(_write(tmp_path, conversation))
    assert loaded.conversation_id == "mine"
    assert [s.label for s in loaded.sessions] == ["1", "3"]
    turns = list(loaded.turns())
    assert turns[0].dia_id == "D1:1"  # generated from the session and position
    assert turns[1].time is None  # session_3 has no date_time
    assert turns[1].image_caption == "a photo of a dog"


def test_a_locomo_dia_id_of_spaces_is_no_id(tmp_path: Path) -> None:
    """Audit (API, minor): "   " was kept as a dia_id (stored as raw:T1), where "" became the positional id."""
    conversation = _locomo([{"speaker": "Ann", "dia_id": "   ", "text": "hi"},
                            {"speaker": "Bo", "dia_id": "", "text": "yo"}])
    assert [turn.dia_id for turn in load_turns(_write(tmp_path, conversation)).turns()] == ["D1:1", "D1:2"]


def test_questions_errors(tmp_path: Path) -> None:
    plain = _write(tmp_path, [{"speaker": "Ann", "text": "hi"}])
    with pytest.raises(ConversationFileError, match="holds no LoCoMo questions"):
        load_questions(plain)
    no_qa = _write(tmp_path, _locomo([{"speaker": "Ann", "text": "hi"}]), "noqa.json")
    with pytest.raises(ConversationFileError, match="has no 'qa' list"):
        load_questions(no_qa)
    bad = _write(tmp_path, _locomo([], qa=[{"question": "When?", "answer": [1], "category": 2}]), "bad.json")
    with pytest.raises(ConversationFileError, match="answer that is a list"):
        load_questions(bad)
    missing = _write(tmp_path, _locomo([], qa=[{"question": "When?", "category": 5}]), "miss.json")
    with pytest.raises(ConversationFileError, match="has no 'answer'"):
        load_questions(missing)
    text_category = _write(tmp_path, _locomo([], qa=[{"question": "Q", "answer": "A", "category": "2"}]), "c.json")
    with pytest.raises(ConversationFileError, match="category '2'"):
        load_questions(text_category)


def test_session_keys_are_read_once_by_their_ascii_number(tmp_path: Path) -> None:
    """`session_01` alone was a KeyError ('session_1'), so was `session_١`; beside `session_1`, `session_01`'s
    turns were never stored and nothing said so."""
    padded = {"speaker_a": "Ann", "speaker_b": "Bo", "session_01": [{"speaker": "Ann", "text": "hi"}],
              "session_01_date_time": "1:56 pm on 8 May, 2023"}
    loaded = load_turns(_write(tmp_path, padded, "padded.json"))
    assert [s.label for s in loaded.sessions] == ["1"] and loaded.sessions[0].time is not None
    arabic = {"speaker_a": "Ann", "speaker_b": "Bo", "session_\u0661": [{"speaker": "Ann", "text": "hi"}]}
    assert "digits other than 0-9" in _error(_write(tmp_path, arabic, "arabic.json"))
    both = _locomo([{"speaker": "Ann", "text": "hi"}], session_01=[{"speaker": "Bo", "text": "yo"}])
    message = _error(_write(tmp_path, both, "both.json"))
    assert "session_1 and session_01 are both session 1" in message and "\n" not in message


def test_speaker_names_are_one_person_whatever_the_keyboard_made_of_them(tmp_path: Path) -> None:
    """A LoCoMo turn by "Jose\u0301" or "josé" beside speaker_a "José" was refused as by nobody; in a plain
    list the two spellings were two participants."""
    locomo = {"speaker_a": "Jos\u00e9", "speaker_b": "Bo", "session_1": [
        {"speaker": "Jose\u0301", "text": "hi"}, {"speaker": "jos\u00e9", "text": "again"},
        {"speaker": "BO", "text": "yo"}]}
    turns = list(load_turns(_write(tmp_path, locomo, "locomo.json")).turns())
    assert [t.speaker for t in turns] == ["Jos\u00e9", "Jos\u00e9", "Bo"] and turns[0].listener == "Bo"
    plain = [{"speaker": "Jos\u00e9", "text": "hi"}, {"speaker": "Bo", "text": "yo"},
             {"speaker": "JOSE\u0301", "text": "again"}]
    loaded = load_turns(_write(tmp_path, plain, "plain.json"))
    assert loaded.participants == ["Jos\u00e9", "Bo"]
    assert [t.listener for t in loaded.turns()] == ["Bo", "Jos\u00e9", "Bo"]


@pytest.mark.parametrize(
    ("conversation", "expected"),
    [
        ({**_locomo([{"speaker": "Ann", "text": "hi"}]), "speaker_a": "   "}, "speaker_a has no visible characters"),
        ({**_locomo([{"speaker": "Ann", "text": "hi"}]), "speaker_b": "\u200b"}, "speaker_b has no visible"),
        ({**_locomo([{"speaker": "Ann", "text": "hi"}]), "speaker_b": "B\no"}, "speaker_b holds a line break"),
        ([{"speaker": "Ann\nBob", "text": "hi"}], "turn 1's speaker holds a line break"),
        ([{"speaker": "\u200b", "text": "hi"}], "turn 1's speaker has no visible characters"),
        ({"format": "strata-memory", "version": 1, "namespace": "x"}, "is a memory export, not a conversation: "
         "load it with `strata import FILE`"),
    ],
)
def test_names_that_name_nobody_or_span_lines_and_exports_are_refused(
    tmp_path: Path, conversation: Any, expected: str
) -> None:
    """Audit: "   " as speaker_a was "speaker_a is a string: give ... as a string"; a zero-width space became a
    participant; "Ann\\nBob" was stored and split the one-line outputs naming the speaker."""
    message = _error(_write(tmp_path, conversation, "conv.json"))
    assert expected in message and "\n" not in message


def test_samples_without_ids_in_a_file_whose_name_cannot_name_them_say_what_to_change(tmp_path: Path) -> None:
    """Found by audit: each sample of a file is stored in a namespace of its own, named by its sample_id or, with
    none, by the file's name: 'my samples.json' gave "the namespace 'multi/my samples-1' contains ' '", a name the
    user never typed, and nothing said to add sample_ids or rename the file."""
    conversation = _locomo([{"speaker": "Ann", "dia_id": "D1:1", "text": "I moved to Denver."}])
    nameless = _write(tmp_path, [{"conversation": conversation}, {"conversation": conversation}], "my samples.json")
    with pytest.raises(ConversationFileError) as error:
        load_conversations(nameless)
    assert str(error.value) == f"{nameless}: " + (
        "sample 1 has no sample_id, and the name it takes from the file, 'my samples-1', cannot "
        "name its namespace (contains ' '): give each sample a 'sample_id' such as 'conv-1', or rename the file to "
        "letters, digits and _ - . @ +; nothing was stored")
    named = _write(tmp_path, [{"sample_id": f"conv-{n}", "conversation": conversation} for n in (1, 2)],
                   "my named samples.json")
    assert [c.conversation_id for c in load_conversations(named)] == ["conv-1", "conv-2"]
    plain = _write(tmp_path, [{"conversation": conversation}] * 2, "samples.json")
    assert [c.conversation_id for c in load_conversations(plain)] == ["samples-1", "samples-2"]


@pytest.mark.parametrize("blank", ["", "  ", None])
def test_a_blank_sample_id_is_refused_not_replaced_by_the_file_name(tmp_path: Path, blank: Any) -> None:
    """A sample_id of "" was taken as none: the sample was stored under the file's name, which no one chose."""
    conversation = _locomo([{"speaker": "Ann", "dia_id": "D1:1", "text": "I moved to Denver."}])
    for data in ({"sample_id": blank, "conversation": conversation}, {**conversation, "sample_id": blank},
                 [{"sample_id": "conv-1", "conversation": conversation}, {"sample_id": blank,
                                                                          "conversation": conversation}]):
        path = _write(tmp_path, data, "samples.json")
        with pytest.raises(ConversationFileError) as error:
            load_conversations(path)
        what = "blank" if isinstance(blank, str) else repr(blank)
        assert str(error.value) == f"{path}: a sample_id is {what}: give it a name such as 'conv-1', or leave " \
            "the key out to name the sample after the file; nothing was stored"

"""Conversation files in, `Turn`s out: the input boundary for whole conversations.

Three shapes are read, detected from the JSON itself:
- a LoCoMo conversation: one object with `speaker_a`, `speaker_b`, `session_N`
  turn lists and `session_N_date_time` strings;
- a LoCoMo benchmark file: a list of `{sample_id, conversation, qa, ...}`;
- a plain list of turns: `[{"speaker", "text", "time"?, "dia_id"?, "session"?, "image_caption"?}]`.

Ingestion copies out only what a memory may see (speakers, dia_id, text,
blip_caption and the session date_time), naming each key it reads, so the
gold annotations (`qa`, `events_*`, `*_observation`, `*_summary`) are never
touched while memory is built. `load_questions` is the one reader of `qa`, and
it is for evaluation only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from strata.memory.errors import InputError, shown_value, unstorable
from strata.memory.moments import read_time
from strata.memory.names import blank, canonical_name, clean_name
from strata.memory.namespaces import check_namespace
from strata.memory.records import Turn
from strata.memory.speakers import listener_of

_SESSION_KEY = re.compile(r"session_(\d+)")  # any digits, so that a key in other digits is refused, not skipped
_DIA_ID = re.compile(r"D(\d+):")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
ADVERSARIAL_CATEGORY = 5

# The only keys ingestion reads from a LoCoMo turn, and from a plain turn.
LOCOMO_TURN_KEYS: tuple[str, ...] = ("speaker", "dia_id", "text", "blip_caption")
PLAIN_TURN_KEYS: tuple[str, ...] = ("speaker", "text", "time", "dia_id", "session", "image_caption")
_TURN_FORMAT = "every turn needs 'speaker' and 'text'"


class ConversationFileError(InputError):
    """A conversation file (or another JSON file it reads: a memory export) that cannot be read; the message
    is one line saying what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


# --- the files' shapes (only the fields ingestion may read) -------------------------------


class LocomoTurnIn(BaseModel):
    """One LoCoMo turn as ingestion sees it: no image URL, no search query."""

    model_config = ConfigDict(extra="forbid")

    speaker: StrictStr = Field(..., min_length=1)
    dia_id: StrictStr | None = None
    text: StrictStr = Field(..., min_length=1)
    blip_caption: StrictStr | None = None


class LocomoConversationIn(BaseModel):
    """A LoCoMo conversation without its gold annotations."""

    model_config = ConfigDict(extra="forbid")

    speaker_a: StrictStr = Field(..., min_length=1)
    speaker_b: StrictStr = Field(..., min_length=1)
    sessions: dict[int, list[LocomoTurnIn]] = Field(..., description="Session number -> its turns (non-empty).")
    date_times: dict[int, StrictStr] = Field(default_factory=dict, description="Session number -> date_time.")


class PlainTurnIn(BaseModel):
    """One turn of a plain JSON list."""

    model_config = ConfigDict(extra="forbid")

    speaker: StrictStr = Field(..., min_length=1)
    text: StrictStr = Field(..., min_length=1)
    time: StrictStr | None = None
    dia_id: StrictStr | None = None
    session: StrictStr | None = None
    image_caption: StrictStr | None = None


# --- what callers get ---------------------------------------------------------------------


class Session(BaseModel):
    """One sitting of a conversation: its label, its date and its turns in order."""

    label: str
    time: datetime | None = None
    turns: list[Turn]


class LoadedConversation(BaseModel):
    """A conversation ready to ingest: who takes part and their sessions of turns."""

    conversation_id: str
    participants: list[str]
    sessions: list[Session]

    def turns(self) -> Iterator[Turn]:
        """Every turn, oldest first, with speaker, listener, session and date filled in."""
        for session in self.sessions:
            yield from session.turns

    def turn_count(self) -> int:
        return sum(len(session.turns) for session in self.sessions)


class Question(BaseModel):
    """One LoCoMo question with its gold answer, for evaluation only.

    For category 5 (adversarial) `answer` holds the benchmark's
    `adversarial_answer`, the answer the question baits, and `adversarial` is
    True: the right response is to say the conversation does not contain it.
    """

    conversation_id: str
    question: str
    answer: str
    evidence: list[str] = Field(default_factory=list, description="dia_ids of the turns that support the answer.")
    category: int
    adversarial: bool = False


# --- reading the file ---------------------------------------------------------------------


def read_json_file(path: str | Path, what: str = "conversation") -> tuple[str, str, Any]:
    """The file's display name, stem and parsed JSON, or a one-line `InputError` naming `what` the file
    should hold (a conversation; a memory, exported: strata/api.py)."""
    name = str(path)
    if not name.strip():
        raise ConversationFileError(f"the path of the {what} file is empty: give the path of a .json {what} file")
    file = Path(path).expanduser()
    try:
        found = file.exists()
    except (OSError, ValueError) as error:  # a name too long for the file system, or holding a NUL
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise ConversationFileError(f"{name[:80]}: cannot be a file's path ({reason}): check the path") from None
    if not found:
        leads_nowhere = file.is_symlink()  # a link whose target is missing, or a loop of links
        raise ConversationFileError(f"{name}: " + ("is a link that leads to no file (a missing target or a loop)"
                                                   if leads_nowhere else "no such file") + ": check the path")
    if file.is_dir():
        raise ConversationFileError(f"{name}: is a folder, not a file: give the path of a .json {what} file")
    if not file.is_file():  # a pipe waits for a writer for ever, a device never ends
        raise ConversationFileError(f"{name}: is not a regular file (a pipe or a device?): save the {what} to a "
                                    "file and give its path")
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ConversationFileError(f"{name}: is not UTF-8 text: save the {what} as UTF-8 JSON") from None
    except OSError as error:
        raise ConversationFileError(f"{name}: cannot be read ({error.strerror}): check its permissions") from None
    if not text.strip():
        raise ConversationFileError(f"{name}: is empty: export the {what} again")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConversationFileError(
            f"{name}: not valid JSON at line {error.lineno} column {error.colno}: fix the file or export it again"
        ) from None
    except RecursionError:
        raise ConversationFileError(f"{name}: nests too deeply to be a {what}: export it again") from None
    except ValueError as error:  # a number of more digits than Python converts (4,300)
        raise ConversationFileError(f"{name}: holds a value JSON readers refuse ({str(error)[:80]}): "
                                    f"export the {what} again") from None
    return name, file.stem, data


def _a(value: object) -> str:
    """The JSON type of a value, as a user who wrote the file would name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, Mapping) else f"a {type(value).__name__}"


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "value"
    return f"{where}: {str(first['msg']).removeprefix('Value error, ')}"


def _pick(raw: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Copy the named keys only; nothing else of `raw` is read."""
    return {key: raw[key] for key in keys if key in raw and raw[key] is not None}


def _checked_turn(raw: object, keys: tuple[str, ...], name: str, where: str) -> dict[str, Any]:
    """The allowed fields of one turn, with a clear message for each way a turn goes wrong."""
    if not isinstance(raw, Mapping):
        raise ConversationFileError(
            f'{name}: {where} is {_a(raw)}, not an object: write each turn as {{"speaker": "...", "text": "..."}}'
        )
    fields = _pick(raw, keys)
    for required in ("speaker", "text"):
        if required not in fields:
            raise ConversationFileError(f"{name}: {where} has no {required}: {_TURN_FORMAT}")
    if "session" in fields and isinstance(fields["session"], int) and not isinstance(fields["session"], bool):
        fields["session"] = str(fields["session"])
    if "time" in fields and isinstance(fields["time"], int | float) and not isinstance(fields["time"], bool):
        fields["time"] = str(fields["time"])  # epoch seconds (or milliseconds), read by `read_time`
    for key, value in fields.items():
        if not isinstance(value, str):
            raise ConversationFileError(f"{name}: {where} has a {key} that is {_a(value)}: write the {key} as a string")
        problem = unstorable(value)  # a NUL or a lone surrogate: `Turn` refuses it, after the file was read
        if problem is not None:
            raise ConversationFileError(f"{name}: {where} has a {key} that {problem}")
    if not fields["speaker"].strip():
        raise ConversationFileError(f"{name}: {where} has an empty speaker: give the speaker's name")
    fields["speaker"] = _person(fields["speaker"], name, f"{where}'s speaker")
    if blank(fields["text"]):  # zero-width spaces or combining marks alone are no words either
        raise ConversationFileError(f"{name}: {where} has empty text: {_TURN_FORMAT}, and the text needs words")
    return fields


def _person(value: str, name: str, where: str) -> str:
    """A participant's name as it is stored (memory/names.py `clean_name`), or one line saying what is wrong
    with it: a name of spaces or zero-width characters alone names nobody, and one holding a line break
    split every one-line output that names the speaker."""
    if len(value.strip().splitlines()) > 1:
        raise ConversationFileError(f"{name}: {where} holds a line break: write the name on one line")
    cleaned = clean_name(value)
    if not cleaned:
        raise ConversationFileError(f"{name}: {where} has no visible characters: give the participant's name")
    return cleaned


def _one_spelling(speaker: str, participants: list[str]) -> str | None:
    """The participant a name is, whatever the keyboard made of it (case, accents composed or not): the
    README's rule on names, memory/names.py `canonical_name`."""
    key = canonical_name(speaker)
    return next((p for p in participants if canonical_name(p) == key), None)


def _parse_time(value: str, name: str, where: str) -> datetime:
    try:
        parsed = read_time(value)
    except ValueError:
        parsed = None
    if parsed is None:
        raise ConversationFileError(
            f"{name}: {where} {value[:60]!r} is not a date that can be read: use ISO 8601 (2023-05-08T13:56, "
            "an offset or Z is converted to UTC), epoch seconds or LoCoMo's '1:56 pm on 8 May, 2023'"
        )
    return parsed


def _turn(name: str, where: str, **fields: Any) -> Turn:
    """A `Turn` of the file, or one line naming the file and the turn: `Turn` has rules of its own, and its
    pydantic error, with its traceback, named neither."""
    try:
        return Turn(**fields)
    except ValidationError as error:
        raise ConversationFileError(f"{name}: {where}: {_describe(error)}") from None


def _unique_ids(sessions: list[Session], name: str) -> list[Session]:
    """Each dia_id names one turn: the stores and the gold evidence both rely on it."""
    seen: set[str] = set()
    for session in sessions:
        for turn in session.turns:
            if turn.dia_id is None:
                continue
            if turn.dia_id in seen:
                raise ConversationFileError(
                    f"{name}: dia_id {turn.dia_id!r} is used by more than one turn: give each turn its own dia_id"
                )
            seen.add(turn.dia_id)
    return sessions


# --- LoCoMo ---------------------------------------------------------------------------------


def _locomo_speaker(raw: Mapping[str, Any], key: str, name: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str):
        state = "missing" if value is None else _a(value)
        raise ConversationFileError(f"{name}: {key} is {state}: give the participant's name as a string")
    problem = unstorable(value)  # the listener of the other speaker's turns
    if problem is not None:
        raise ConversationFileError(f"{name}: {key} {problem}")
    return _person(value, name, key)


def _read_locomo(raw: Mapping[str, Any], name: str) -> LocomoConversationIn:
    """The ingestible part of a LoCoMo conversation, read key by allowed key."""
    speaker_a = _locomo_speaker(raw, "speaker_a", name)
    speaker_b = _locomo_speaker(raw, "speaker_b", name)
    keys: dict[int, str] = {}  # each session number, and the one key that holds it
    for key in raw:
        match = _SESSION_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            continue
        if not match.group(1).isascii():  # int() reads any script's digits, and the key was then not found
            raise ConversationFileError(f"{name}: {key!r} numbers its session in digits other than 0-9: "
                                        "write it as session_1, session_2, ...")
        number = int(match.group(1))
        if number in keys:  # session_01 beside session_1: one of them was read twice, the other never
            raise ConversationFileError(f"{name}: {keys[number]} and {key} are both session {number}: give "
                                        "each session its own number")
        keys[number] = key
    sessions: dict[int, list[LocomoTurnIn]] = {}
    date_times: dict[int, str] = {}
    for number in sorted(keys):
        label = keys[number]
        turns = raw[label]
        if turns is None:
            continue
        if not isinstance(turns, list):
            raise ConversationFileError(f"{name}: {label} is {_a(turns)}: make it a list of turns")
        if not turns:  # a session without turns: its date_time is not read either
            continue
        parsed: list[LocomoTurnIn] = []
        for index, turn in enumerate(turns, start=1):
            where = f"{label} turn {index}"
            fields = _checked_turn(turn, LOCOMO_TURN_KEYS, name, where)
            fields["speaker"] = _one_spelling(fields["speaker"], [speaker_a, speaker_b]) or fields["speaker"]
            if fields["speaker"] not in (speaker_a, speaker_b):
                raise ConversationFileError(
                    f"{name}: {where} is by {fields['speaker']!r}, who is neither speaker_a ({speaker_a!r}) "
                    f"nor speaker_b ({speaker_b!r}): fix the speaker's name"
                )
            try:
                parsed.append(LocomoTurnIn.model_validate(fields))
            except ValidationError as error:
                raise ConversationFileError(f"{name}: {where}: {_describe(error)}") from None
        sessions[number] = parsed
        date_key = f"{label}_date_time"
        date_time = raw.get(date_key)
        if date_time is not None:
            if not isinstance(date_time, str):
                raise ConversationFileError(
                    f"{name}: {date_key} is {_a(date_time)}: write it like '1:56 pm on 8 May, 2023'"
                )
            date_times[number] = date_time
    if not sessions:
        raise ConversationFileError(
            f"{name}: has no session with turns: a LoCoMo conversation needs session_1, session_2, ... lists"
        )
    return LocomoConversationIn(speaker_a=speaker_a, speaker_b=speaker_b, sessions=sessions, date_times=date_times)


def _locomo_conversation(raw: Mapping[str, Any], conversation_id: str, name: str) -> LoadedConversation:
    conversation = _read_locomo(raw, name)
    participants = [conversation.speaker_a, conversation.speaker_b]
    sessions: list[Session] = []
    for number, turns_in in conversation.sessions.items():
        label = str(number)
        date_time = conversation.date_times.get(number)
        when = _parse_time(date_time, name, f"session_{number}_date_time") if date_time else None
        turns = [
            _turn(
                name, f"session_{number} turn {index}",
                speaker=turn.speaker.strip(),
                text=turn.text,
                time=when,
                dia_id=(turn.dia_id or "").strip() or f"D{number}:{index}",  # "   " is no id, as "" is
                session=label,
                listener=listener_of(turn.speaker.strip(), tuple(participants)),
                image_caption=turn.blip_caption or None,
            )
            for index, turn in enumerate(turns_in, start=1)
        ]
        sessions.append(Session(label=label, time=when, turns=turns))
    return LoadedConversation(
        conversation_id=conversation_id, participants=participants, sessions=_unique_ids(sessions, name)
    )


def _sample_id(raw: Mapping[str, Any], fallback: str, name: str) -> str:
    """The sample's own id, or `fallback` (from the file's name) when it gives none. One it gives but leaves
    blank is refused: the file's name taken for it would store the sample under a namespace no one chose."""
    if "sample_id" not in raw:
        return fallback
    value = raw["sample_id"]
    if not isinstance(value, str) or not value.strip():
        what = "blank" if isinstance(value, str) else shown_value(value)
        raise ConversationFileError(f"{name}: a sample_id is {what}: give it a name such as "
                                    "'conv-1', or leave the key out to name the sample after the file; nothing "
                                    "was stored")
    return value.strip()


# --- plain turns ------------------------------------------------------------------------------


def _plain_conversation(raw_turns: list[Any], conversation_id: str, name: str) -> LoadedConversation:
    """Turns in file order; a new session starts whenever the session label changes."""
    parsed: list[tuple[int, PlainTurnIn, str, datetime | None]] = []
    participants: list[str] = []
    for index, raw in enumerate(raw_turns, start=1):
        where = f"turn {index}"
        try:
            turn = PlainTurnIn.model_validate(_checked_turn(raw, PLAIN_TURN_KEYS, name, where))
        except ValidationError as error:
            raise ConversationFileError(f"{name}: {where}: {_describe(error)}") from None
        when = _parse_time(turn.time, name, f"{where} time") if turn.time and turn.time.strip() else None
        from_id = _DIA_ID.match(turn.dia_id or "")
        label = (turn.session or "").strip() or (from_id.group(1) if from_id else "1")
        speaker = _one_spelling(turn.speaker, participants)  # "José" and "jose\u0301" are one participant
        if speaker is None:
            participants.append(speaker := turn.speaker)
        parsed.append((index, turn.model_copy(update={"speaker": speaker}), label, when))

    sessions: list[Session] = []
    for index, turn, label, when in parsed:
        speaker = turn.speaker.strip()
        if not sessions or sessions[-1].label != label:
            sessions.append(Session(label=label, time=None, turns=[]))
        session = sessions[-1]
        if when is not None and (session.time is None or when < session.time):
            session.time = when
        session.turns.append(
            _turn(
                name, f"turn {index}",
                speaker=speaker,
                text=turn.text,
                time=when,
                dia_id=(turn.dia_id or "").strip() or None,
                session=label,
                listener=listener_of(speaker, tuple(participants)),
                image_caption=(turn.image_caption or "").strip() or None,
            )
        )
    return LoadedConversation(
        conversation_id=conversation_id, participants=participants, sessions=_unique_ids(sessions, name)
    )


# --- detection --------------------------------------------------------------------------------

_SHAPES = (
    "a LoCoMo conversation (an object with speaker_a, speaker_b and session_N lists), "
    "a list of LoCoMo samples (objects with 'conversation'), "
    'or a list of turns such as [{"speaker": "Ann", "text": "Hi"}]'
)


def _is_sample(value: object) -> bool:
    return isinstance(value, Mapping) and "conversation" in value


def _sample_conversation(sample: Mapping[str, Any], fallback_id: str, name: str) -> LoadedConversation:
    conversation = sample["conversation"]
    if not isinstance(conversation, Mapping) or "speaker_a" not in conversation:
        raise ConversationFileError(
            f"{name}: sample {fallback_id!r} has a 'conversation' that is not a LoCoMo conversation: {_SHAPES}"
        )
    return _locomo_conversation(conversation, _sample_id(sample, fallback_id, name), name)


def _file_named(sample: Mapping[str, Any], fallback: str, index: int, name: str) -> str:
    """The id a sample without a `sample_id` takes from the file's name, which names its namespace (each sample
    of a file is stored in one of its own): a name that cannot name one ("my samples.json") is said here, as
    what the user can change, instead of as a namespace the user never typed."""
    if _sample_id(sample, "", name):
        return fallback
    try:
        check_namespace(fallback)
    except InputError as error:
        why = str(error).removeprefix(f"the namespace {fallback!r} ").split(":")[0]
        raise ConversationFileError(
            f"{name}: sample {index} has no sample_id, and the name it takes from the file, {fallback!r}, cannot "
            f"name its namespace ({why}): give each sample a 'sample_id' such as 'conv-{index}', or rename the file "
            "to letters, digits and _ - . @ +; nothing was stored") from None
    return fallback


def _conversations(data: Any, name: str, stem: str) -> list[LoadedConversation]:
    if isinstance(data, Mapping):
        if "speaker_a" in data:
            return [_locomo_conversation(data, _sample_id(data, stem, name), name)]
        if _is_sample(data):
            return [_sample_conversation(data, stem, name)]
        if data.get("format") == "strata-memory":  # memory/portability.py FORMAT
            raise ConversationFileError(f"{name}: is a memory export, not a conversation: load it with "
                                        "`strata import FILE` (Memory.import_from)")
        raise ConversationFileError(f"{name}: holds an object of an unknown shape: give {_SHAPES}")
    if isinstance(data, list):
        if not data:
            raise ConversationFileError(f"{name}: holds an empty list: add turns, or give {_SHAPES}")
        if _is_sample(data[0]):
            for index, sample in enumerate(data, start=1):
                if not _is_sample(sample):
                    raise ConversationFileError(
                        f"{name}: item {index} has no 'conversation' while item 1 does: "
                        "a benchmark file lists LoCoMo samples only"
                    )
            return [_sample_conversation(s, _file_named(s, f"{stem}-{i}", i, name), name)
                    for i, s in enumerate(data, start=1)]
        return [_plain_conversation(data, stem, name)]
    raise ConversationFileError(f"{name}: holds {_a(data)}: give {_SHAPES}")


def load_conversations(path: str | Path) -> list[LoadedConversation]:
    """Every conversation in a file: one for a conversation or a turn list, N for a benchmark file."""
    name, stem, data = read_json_file(path)
    conversations = _conversations(data, name, stem)
    ids = [c.conversation_id for c in conversations]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice is not None:  # both would go to one namespace, the second over the first
        raise ConversationFileError(f"{name}: holds two conversations with the sample_id {twice!r}: give each "
                                    "its own sample_id; nothing was stored")
    return conversations


def load_turns(path: str | Path) -> LoadedConversation:
    """The one conversation a file holds, ready to ingest (gold annotations are never read)."""
    conversations = load_conversations(path)
    if len(conversations) != 1:
        ids = ", ".join(c.conversation_id for c in conversations[:3]) + (", ..." if len(conversations) > 3 else "")
        raise ConversationFileError(
            f"{path}: holds {len(conversations)} conversations ({ids}): "
            "use load_conversations to read them all, or split the file"
        )
    return conversations[0]


# --- gold questions (evaluation only) ----------------------------------------------------------


def _evidence(raw: object, name: str, where: str) -> list[str]:
    """Gold dia_ids, repairing the benchmark's known slips ('D8:6; D9:17', 'D:11:26', 'D')."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ConversationFileError(f"{name}: {where} evidence is not a list of dia_ids: write it like ['D1:3']")
    ids = [f"D{s}:{t}" for item in raw for s, t in _EVIDENCE_ID.findall(item)]
    return list(dict.fromkeys(ids))


def _answer(value: object, name: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConversationFileError(f"{name}: {where} has an answer that is {_a(value)}: write it as text")
    return str(value)


def _questions(qa: object, conversation_id: str, name: str) -> list[Question]:
    if not isinstance(qa, list):
        raise ConversationFileError(f"{name}: 'qa' of {conversation_id} is {_a(qa)}: make it a list of questions")
    questions: list[Question] = []
    for index, item in enumerate(qa, start=1):
        where = f"question {index} of {conversation_id}"
        if not isinstance(item, Mapping):
            raise ConversationFileError(f"{name}: {where} is {_a(item)}, not an object")
        category = item.get("category")
        if isinstance(category, bool) or not isinstance(category, int):
            raise ConversationFileError(f"{name}: {where} has category {category!r}: use a number 1-5")
        question = item.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ConversationFileError(f"{name}: {where} has no question text")
        adversarial = category == ADVERSARIAL_CATEGORY
        answer_key = "adversarial_answer" if adversarial and "adversarial_answer" in item else "answer"
        if answer_key not in item:
            raise ConversationFileError(f"{name}: {where} has no '{answer_key}': give every question its answer")
        questions.append(
            Question(
                conversation_id=conversation_id,
                question=question.strip(),
                answer=_answer(item[answer_key], name, where),
                evidence=_evidence(item.get("evidence"), name, where),
                category=category,
                adversarial=adversarial,
            )
        )
    return questions


def load_questions(path: str | Path) -> list[Question]:
    """The gold questions of a LoCoMo file, for evaluation only; never call this while ingesting."""
    name, stem, data = read_json_file(path)
    if isinstance(data, Mapping) and "speaker_a" in data:
        samples: list[tuple[Mapping[str, Any], str]] = [(data, _sample_id(data, stem, name))]
    elif _is_sample(data):
        samples = [(data, _sample_id(data, stem, name))]
    elif isinstance(data, list) and data and all(_is_sample(item) for item in data):
        samples = [(item, _sample_id(item, f"{stem}-{index}", name)) for index, item in enumerate(data, start=1)]
    else:
        raise ConversationFileError(f"{name}: holds no LoCoMo questions: give a LoCoMo conversation with a 'qa' list")
    questions: list[Question] = []
    for sample, conversation_id in samples:
        if "qa" not in sample:
            raise ConversationFileError(f"{name}: {conversation_id} has no 'qa' list: it carries no questions")
        questions.extend(_questions(sample["qa"], conversation_id, name))
    return questions

"""Names and text beyond ASCII: one person whatever the keyboard, words of every script, requests typed on a phone."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from strata.memory.entities import split_entities, tokenize
from strata.memory.errors import InputError
from strata.memory.facts import extract_facts, relation_of, without_small_talk
from strata.memory.forgetting import read_forget_request, same_person
from strata.memory.graph.entities import normalise
from strata.memory.namespaces import check_namespace
from strata.memory.records import Turn
from strata.memory.speakers import resolve_participant

from strata import Memory

REPO = Path(__file__).resolve().parents[1]
NFC = unicodedata.normalize("NFC", "José")
NFD = unicodedata.normalize("NFD", "José")


def test_erase_about_a_name_finds_every_spelling(data_dir: Path) -> None:
    """Bug 1: NFD 'José' from a phone and NFC 'José' from a desktop are one person to erase (privacy)."""
    memory = Memory("u", data_dir=str(data_dir))
    memory.add([
        {"speaker": NFC, "text": "My passport number is X1234567.", "time": "2023-05-08T10:00"},
        {"speaker": "Ana", "text": "Noted.", "time": "2023-05-08T10:01"},
        {"speaker": NFD, "text": "I was diagnosed with diabetes last year.", "time": "2023-05-08T10:02"},
    ])
    memory.erase(about=NFC)
    left = [r.text for kind in ("raw", "fact") for r in memory.store.all(kind)]  # type: ignore[arg-type]
    assert not [t for t in left if "passport" in t or "diabetes" in t], left
    assert memory.store.participants() == ["Ana"]


@pytest.mark.parametrize(("stored", "asked"), [
    (NFD, NFC), ("Ann\u00a0Lee", "Ann Lee"), ("Ann\u200b", "Ann"), ("\ufeffAnn", "Ann"), ("Ａｎｎ", "Ann"),
    ("Strauß", "STRAUSS"), ("İsmail", "ismail"), ("İsmail", "İSMAİL"),
])
def test_same_person_whatever_the_spelling(stored: str, asked: str) -> None:
    """Bug 1: the forget rule's ownership test reads a name as `canonical_name` does."""
    assert same_person(stored, asked)
    assert not same_person("Ann", "Ann Lee")


def test_everything_about_an_accented_participant_is_about_them() -> None:
    """Bug 2: 'forget everything about Zoë' names Zoë Smith, and a name no participant has is refused."""
    request = read_forget_request("Please forget everything about Zoë.", ["Maria"], ["Zoë Smith", "Maria"])
    assert request is not None and request.about == ["Zoë Smith"]
    stranger = read_forget_request("Please forget everything about Zoe.", ["Bob"], ["Zoë Smith", "Bob"])
    assert stranger is not None and stranger.about == [] and stranger.stranger == "Zoe"
    own = read_forget_request("Forget everything about my trip.", ["Bob"], ["Bob"])
    assert own is not None and own.stranger == ""


def test_owner_forgetting_everything_about_zoe_keeps_own_records(data_dir: Path) -> None:
    """Bug 2 end to end: the owner's request deletes Zoë's records, never the owner's own."""
    memory = Memory("fam", data_dir=str(data_dir), owner="Maria")
    memory.add([
        {"speaker": "Zoë Smith", "text": "I adopted a cat named Miso.", "time": "2023-05-08T10:00"},
        {"speaker": "Maria", "text": "I bought a new blue bike.", "time": "2023-05-08T10:01"},
    ])
    memory.chat("Please forget everything about Zoë.", speaker="Maria")
    left = [r.text for r in memory.store.all("raw")]
    assert any("blue bike" in t for t in left), left
    assert not any("Miso" in t for t in left), left


def test_words_of_any_script_are_tokens() -> None:
    """Bug 3: accented words stay whole, CJK gives characters and pairs, apostrophe names are names."""
    assert tokenize("José vive en Málaga") == ["josé", "viv", "en", "málaga"]
    assert "rich" not in tokenize("Zürich") and "scar" not in tokenize("Óscar")
    assert "钢琴" in tokenize("我的女儿在学习钢琴。") and "القهوة" in tokenize("أنا أحب القهوة")
    assert tokenize(NFD) == tokenize(NFC)
    assert split_entities("Zoë and Renée met Seán O'Brien in Kraków").names == ["Renée", "Seán O'Brien", "Kraków"]
    assert "mile" not in split_entities("I had lunch with Émile at the office.").keywords


def test_forget_request_keeps_non_latin_names() -> None:
    """Bug 4: 'forget my cat 小白' names 小白, so the cat 大黄 is spared."""
    request = read_forget_request("Please forget my cat 小白.", ["Li"])
    assert request is not None and "小白" in request.words
    doctor = read_forget_request("Please forget that my doctor is Dr. أحمد.", ["Omar"])
    assert doctor is not None and "أحمد" in doctor.words


def test_brief_turn_keeps_non_latin_sentences() -> None:
    """Bug 5: a Chinese or Arabic sentence is not small talk."""
    chinese = "Thanks so much! I got the job. 我下个月开始在阿里巴巴杭州总部上班。"
    assert without_small_talk(chinese, "Li") == "I got the job. 我下个月开始在阿里巴巴杭州总部上班。"
    arabic = "Thanks! I moved last week. عنواني الجديد هو شارع التحرير ٢٥ في القاهرة."
    assert "القاهرة" in without_small_talk(arabic, "Omar")


@pytest.mark.parametrize("text", ["I’d like you to forget my pottery class.",
                                  "Don’t remember that I have a pottery class."])
def test_curly_apostrophes_make_requests(text: str) -> None:
    """Bug 6: what a phone keyboard types is a request as the straight apostrophe is."""
    request = read_forget_request(text, ["Ann"])
    assert request is not None and {"pottery", "class"} <= request.words


def test_questions_name_accented_and_cjk_participants() -> None:
    """Bug 7: 'Émile', 'ÉMILE', an NFD 'José' and '李明' without a space resolve to their participant."""
    people = ["Bob Stone", "Émile Durand", NFC, "李明"]
    assert resolve_participant("What is Émile's job?", people) == ["Émile Durand"]
    assert resolve_participant("What does ÉMILE do?", people) == ["Émile Durand"]
    assert resolve_participant(f"Where does {NFD} live?", people) == [NFC]
    assert resolve_participant("李明住在哪里？", people) == ["李明"]


def test_a_question_typed_without_accents_names_the_participant(data_dir: Path) -> None:
    """'Emile' on a keyboard without accents is Émile to a question (not to an erasure: see the test above)."""
    assert resolve_participant("What is Emile's job?", ["Bob Stone", "Émile Durand"]) == ["Émile Durand"]
    assert resolve_participant("What did Zoe adopt?", ["Zoë", "Bob"]) == ["Zoë"]
    memory = Memory("u", data_dir=str(data_dir))
    memory.add([
        {"speaker": "Émile", "text": "I work as a carpenter in Lyon these days.", "time": "2023-05-08T13:56"},
        {"speaker": "Bob", "text": "Nice! I work as a nurse at the hospital.", "time": "2023-05-08T13:57"},
    ])
    accented, plain = memory.ask("What is Émile's job?"), memory.ask("What is Emile's job?")
    assert "carpenter" in plain.answer and plain.cited_ids == accented.cited_ids == ["T1"]


def test_relations_of_non_ascii_names_and_places() -> None:
    """Bug 8: the Refresher's relation for 'Émile lives in Paris' and 'Ann lives in 北京'."""
    assert relation_of("Émile lives in Paris now.", ("Émile",)) == ("Émile", "lives_in", "Paris")
    assert relation_of("李明 lives in Beijing.", ("李明",)) == ("李明", "lives_in", "Beijing")
    assert relation_of("Ann lives in 北京.", ("Ann",)) == ("Ann", "lives_in", "北京")


def test_chinese_turns_give_facts() -> None:
    """Bug 9: sentences end at 。 and a Chinese sentence has words; each fact says whose words they are."""
    turn = Turn(speaker="李明", text="我上个月搬到了杭州。周末我们去爬山了。")
    facts = [f.text for f in extract_facts(turn)]
    assert facts == ["李明: 我上个月搬到了杭州。", "李明: 周末我们去爬山了。"]


def test_namespaces_with_combining_marks() -> None:
    """Bug 10: Indic, Thai and vowelled Arabic names are accepted; NFD is stored as NFC. Every name is
    composed now, the Ohm sign and a compatibility ideograph too (a memory an earlier version stored under
    such a spelling still opens: tests/test_namespaces.py)."""
    for name in ("प्रिया", "users/अंकित", "สมศักดิ์", "مُحَمَّد", "ਗੁਰਪ੍ਰੀਤ"):
        assert check_namespace(name) == unicodedata.normalize("NFC", name)
    assert check_namespace(unicodedata.normalize("NFD", "users/zoë")) == "users/zoë"
    assert [check_namespace(name) for name in ("\u2126hm", "\uf900")] == ["\u03a9hm", "\u8c48"]
    for kept in ("ann", "users/李明", "\uff41nn", "Ann"):  # compatibility forms and case stay apart
        assert check_namespace(kept) == kept
    for refused in ("\u0301abc", "a/\u0301", "a b"):
        with pytest.raises(InputError):
            check_namespace(refused)


def test_cli_prints_to_a_console_that_is_not_utf8(tmp_path: Path, offline_env: dict[str, str]) -> None:
    """Bug 11: CJK evidence on a cp1252 stdout is escaped, not a UnicodeEncodeError."""
    turns = tmp_path / "t.json"
    turns.write_text(json.dumps([{"speaker": "李明", "text": "我搬到了杭州。", "time": "2023-05-08T10:02"}]), "utf-8")
    base = [sys.executable, "-m", "strata", "--data-dir", str(tmp_path / "d"), "--namespace", "u"]
    env = {**offline_env, "PYTHONIOENCODING": "cp1252"}
    assert subprocess.run([*base, "ingest", str(turns)], cwd=REPO, env=env, capture_output=True).returncode == 0
    asked = subprocess.run([*base, "ask", "--retrieve-only", "杭州"], cwd=REPO, env=env, capture_output=True)
    assert asked.returncode == 0, asked.stderr[-400:]
    assert b"\\u676d\\u5dde" in asked.stdout


def test_model_entity_names_of_any_script() -> None:
    """Bug 12: the model's entity 北京 is kept and Müller and Möller stay two."""
    beijing, muller, moller = normalise("北京"), normalise("Müller"), normalise("Möller")
    assert beijing is not None and beijing.key == "北京"
    assert muller is not None and moller is not None and muller.key != moller.key


def test_a_narrative_keeps_a_fact_s_own_end_mark() -> None:
    """Episodes and summaries added "." after a sentence ended by "。" ("我搬到了杭州。.")."""
    from strata.memory.episodes import as_sentence

    assert [as_sentence(t) for t in ("我搬到了杭州。", "هل انتقلت؟", "Ann moved", "Really?")] == [
        "我搬到了杭州。", "هل انتقلت؟", "Ann moved.", "Really?"]


@pytest.mark.parametrize("text", ["\u200b", "\u034f", " \u0301\u20dd ", "\ufe0f\u2060\ufeff\u00ad", "\u3164\u2800",
                                  "\u2028\u3000\t", "\x01"])
def test_text_showing_nothing_is_blank(text: str) -> None:
    """Found by audit: `str.strip()` keeps zero-width spaces and combining marks, so a question of them
    retrieved the whole namespace and a turn of a combining grapheme joiner was stored as a turn of nothing."""
    from strata.memory.names import blank

    assert blank(text)
    with pytest.raises(ValueError, match="text is empty"):
        Turn(speaker="Ann", text=text)


@pytest.mark.parametrize("text", ["...", "👍", "中", "ก", "e\u0301", "\u1100\u1161", "\u0915\u093c", "\u200bhi",
                                  "\u00a0ok", "٣"])
def test_text_a_reader_can_see_is_not_blank(text: str) -> None:
    from strata.memory.names import blank

    assert not blank(text) and Turn(speaker="Ann", text=text).text.strip() == text.strip()

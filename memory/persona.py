"""Offline persona distillation: stable traits of a participant from their facts.

AdaMem keeps a persona memory per participant (preferences, profile aspects)
distilled from episodic evidence. Offline, a fact becomes a trait when its
attribute names a stable aspect of a person (what they like, do, live with).
"""

from __future__ import annotations

import hashlib
import re

_CAMEL = re.compile(r"(?<=[a-z\d])(?=[A-Z])")  # "myFavoriteBook": a capital begins a part, as "_" does
_PART = r"(?:^|[^a-z])(?:{})"  # a word that begins one of the attribute's parts: "likes_" yes, "education" not "cat"
ASPECTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("preferences", re.compile(_PART.format(r"like|dislike|love|enjoy|favou?rite|prefer|fan_of|into"))),
    ("work", re.compile(_PART.format(r"work|job|career|profession|study|studies|school|major"))),
    ("home", re.compile(_PART.format(r"live|moved|from|home|hometown|country|city"))),
    ("family", re.compile(_PART.format(
        r"pet|dog|cat|kid|child|son|daughter|husband|wife|partner|married|family|parent"))),
    ("identity", re.compile(r"^(identity|is_a|age|gender|nationality)$")),  # not a bare "is": a passing state
    ("hobbies", re.compile(_PART.format(r"hobby|play|paint|run|hike|read|sing|dance|cook|garden|volunteer"))),
)


def aspect_of(attribute: str) -> str | None:
    """The persona aspect an attribute belongs to, or None when it is not a stable trait. Its parts are
    snake_case's or camelCase's ("my_favorite_book", "myFavoriteBook"): lower-cased whole, a camelCase
    part after the first ran into the one before it ("myfavoritebook") and named no aspect."""
    attribute = _CAMEL.sub("_", attribute).lower().strip()
    if not attribute:
        return None
    for aspect, pattern in ASPECTS:
        if pattern.search(attribute):
            return aspect
    return None


def persona_id(participant: str, aspect: str, value: str) -> str:
    digest = hashlib.sha1(f"{participant}|{aspect}|{value.lower()}".encode()).hexdigest()[:10]
    return f"persona:{participant}:{aspect}:{digest}"

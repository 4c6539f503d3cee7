"""A small OpenAI-compatible chat server on loopback, for the model's wire end to end.

`OpenAIStub` serves `POST /v1/chat/completions` from a thread. Each request is
recorded (its JSON body) and answered from a queue of scripted replies first
(`content`, `tool_call`, `status`, `refused`, `broken`, `hang`, `cut`, `trickle`; `by_role` for the first
request of one role), then by `role_reply`: a plausible
reply for whichever role sent the request (recognised by its system prompt),
following that role's output contract in `strata.prompts`. Like a real server,
it answers a `response_format` request with JSON content and a forced tool
choice with a tool call, and it reports token usage. A request with `"stream": true`
(a graph run streamed with `stream_mode="messages"`) is answered as server-sent events,
like OpenAI's: the reply in pieces, then its finish reason and `[DONE]`. No connection
leaves the machine.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from strata.memory.entities import STOPWORDS
from strata.prompts import graph as graph_prompts
from strata.prompts import judge as judge_prompts
from strata.prompts import memory as memory_prompts
from strata.prompts import refresher as refresher_prompts
from strata.prompts import research as research_prompts
from strata.prompts import working as working_prompts

ROLE_OF_SYSTEM_PROMPT = {
    memory_prompts.FACTS_SYSTEM: "facts",
    memory_prompts.BOUNDARY_SYSTEM: "boundary",
    memory_prompts.EPISODE_SYSTEM: "episode",
    research_prompts.PLAN_SYSTEM: "plan",
    research_prompts.SUBQUESTION_SYSTEM: "subquestion",
    judge_prompts.JUDGE_SYSTEM: "judge",
    refresher_prompts.REFRESH_SYSTEM: "refresh",
    working_prompts.ANSWER_SYSTEM: "answer",
    graph_prompts.NOTE_SYSTEM: "note",
    graph_prompts.CAUSAL_SYSTEM: "causal",
    graph_prompts.SUMMARY_SYSTEM: "summary",
}


@dataclass
class Scripted:
    """One scripted reply: a status with a body, or a chat completion (content or a tool call), maybe late."""

    status: int = 200
    content: str | None = None
    tool_args: str | None = None  # arguments of a tool call (raw text: may be malformed on purpose)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    error_code: str | None = None  # the error body's `code` (a provider's `content_filter`); else the status
    body: dict[str, Any] | None = None  # a whole response body sent as it is (a broken completion)
    finish: str | None = None  # the finish reason, when not the usual one ("length": the reply hit its limit)
    no_finish: bool = False  # a whole reply sent without any finish reason (some OpenAI-compatible servers)
    cut: int | None = None  # streamed: only this many characters of the reply, then the connection closes
    events: bool = True  # streamed: False sends the headers and closes, with no event at all
    trickle: float = 0.0  # seconds between two bytes of the body, sent after the headers (for at most 6 s)


def content(text: str) -> Scripted:
    return Scripted(content=text)


def tool_call(arguments: str) -> Scripted:
    return Scripted(tool_args=arguments)


def status(code: int, headers: dict[str, str] | None = None) -> Scripted:
    return Scripted(status=code, headers=headers or {})


def refused(code: str, status: int = 400) -> Scripted:
    """An error like a provider's refusal of one prompt (`content_filter`, `context_length_exceeded`)."""
    return Scripted(status=status, content=f"the request was refused ({code})", error_code=code)


def broken(body: dict[str, Any]) -> Scripted:
    """A 200 whose body is not a chat completion (a proxy's reply, a truncated response)."""
    return Scripted(body=body)


def hang(seconds: float) -> Scripted:
    return Scripted(content="{}", delay=seconds)


def cut(chars: int) -> Scripted:
    """A streamed reply that stops after `chars` characters: no finish reason (the connection closed early)."""
    return Scripted(cut=chars)


def trickle(every: float) -> Scripted:
    """A reply whose headers come at once and its body one byte every `every` seconds (a buffering proxy)."""
    return Scripted(trickle=every)


def role_of(body: dict[str, Any]) -> str:
    system = next((m.get("content", "") for m in body.get("messages", []) if m.get("role") == "system"), "")
    return ROLE_OF_SYSTEM_PROMPT.get(system, "unknown")


def user_prompt(body: dict[str, Any]) -> str:
    return next((str(m.get("content", "")) for m in reversed(body.get("messages", [])) if m.get("role") == "user"), "")


def current_input(prompt: str) -> str:
    """The text a role is asked about: the last line of its user prompt."""
    found = re.search(r"(?:Current input(?: \([^)]*\))?|Question|Current turn \[[^\]]*\]): (.+)$", prompt)
    return found.group(1).strip() if found else ""


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if len(w) > 2 and w not in STOPWORDS}


def evidence_lines(prompt: str) -> list[str]:
    """The `[id] ...` lines of an evidence or memory block."""
    return [line.strip() for line in prompt.splitlines() if re.match(r"\s*\[[^\]]+\]", line)]


def best_line(question: str, lines: list[str]) -> tuple[str, float]:
    """The evidence line sharing the largest share of the question's content words."""
    wanted = content_words(question)
    if not wanted or not lines:
        return "", 0.0
    scored = [(len(wanted & content_words(line)) / len(wanted), line) for line in lines]
    share, line = max(scored, key=lambda pair: pair[0])
    return line, share


def role_reply(role: str, prompt: str) -> dict[str, Any]:
    """What a careful model would answer each role, by the role's output contract."""
    text = current_input(prompt)
    if role == "plan":
        when = bool(re.match(r"\s*when\b", text, re.IGNORECASE))
        return {"rewrite_query": text or "the conversation",
                "intent_vector": {"b_fine": 0, "b_abs": 0, "b_event": int(when), "b_atomic": int(not when)},
                "memory_type": "episode" if when else "fact", "K_dyn": 5}
    if role == "judge":
        question = text.rstrip().endswith("?") or prompt.startswith("Mode: ask")
        _, share = best_line(text, evidence_lines(prompt))
        enough = share >= 0.5 or not question
        return {"Action": "Pass" if enough else "Retry", "confidence": 0.8 if enough else 0.6, "conflicts": [],
                "reason": "an item states what is asked" if enough else "no item states what is asked"}
    if role == "answer":
        line, share = best_line(text, evidence_lines(prompt))
        if share == 0.0:
            return {"answer": "Not in memory.", "cited_ids": []}
        cited = re.match(r"\s*\[([^\]]+)\]", line)
        said = re.sub(r"^\s*\[[^\]]+\]\s*(?:\([^)]*\)\s*)?", "", line)
        said = said.split(": ", 1)[-1]
        return {"answer": " ".join(said.split()[:12]), "cited_ids": [cited.group(1)] if cited else []}
    if role == "facts":
        speaker = re.search(r"Speaker: (.+)", prompt)
        who = speaker.group(1).strip() if speaker else "The speaker"
        return {"facts": [{"content": f"{who} said: {text}"[:200], "subject": who, "attribute": "", "value": ""}]
                if text else [], "related_id": [], "timestamp": "empty"}
    if role == "boundary":
        return {"T_t": 0, "reason": "the same topic continues", "confidence": 0.7, "topic_summary": "catching up"}
    if role == "episode":
        return {"title": "Catching up", "content": "The two friends caught up on recent news.", "timestamp": "empty"}
    if role == "refresh":
        return {"Action": "No-Op", "memory_type": "fact", "dataList": [], "reason": "the memories agree"}
    return {}


class OpenAIStub:
    """The server: `url` for `base_url`, `requests` as received, `queue` of scripted replies served first."""

    def __init__(self, reply: Callable[[str, str], dict[str, Any]] = role_reply) -> None:
        self.reply = reply
        self.queue: list[Scripted] = []
        self.requests: list[dict[str, Any]] = []
        self.served: list[int] = []  # status of each reply, in order
        self.generation = 0  # how many resets: a reply still in flight across one is not recorded
        self.lock = threading.Lock()
        self.reject_structured = False  # answer response_format/tools with 400, like a server without them
        self.filtered = ""  # a word that gets a 400 content_filter when a prompt asks about it (its last line)
        self.by_role: dict[str, Scripted] = {}  # a reply for the first request of that role, before the queue
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def roles(self) -> list[str]:
        return [role_of(body) for body in self.requests]

    def script(self, *replies: Scripted) -> None:
        with self.lock:
            self.queue.extend(replies)

    def reset(self) -> None:
        with self.lock:
            self.queue.clear()
            self.requests.clear()
            self.served.clear()
            self.generation += 1
            self.reject_structured = False
            self.filtered = ""
            self.by_role.clear()

    def answer(self, body: dict[str, Any]) -> Scripted:
        """The reply to one request; its status goes into `served` at the request's own place, so the two
        lists pair up even when a client gave up on a slow reply and asked again before it was sent."""
        with self.lock:
            place, generation = len(self.requests), self.generation
            self.requests.append(body)
            self.served.append(0)
            scripted = self.by_role.pop(role_of(body), None) or (self.queue.pop(0) if self.queue else None)
            reject = self.reject_structured
            filtered = self.filtered
        if scripted is None:
            scripted = self._unscripted(body, reject, filtered)
        elif scripted.status == 200 and scripted.body is None and scripted.content is None \
                and scripted.tool_args is None:  # the role's usual reply, sent oddly (a stream cut short, a trickle)
            usual = self._unscripted(body, False, "")
            scripted = replace(scripted, content=usual.content, tool_args=usual.tool_args)
        with self.lock:
            if generation == self.generation:  # a reset meanwhile began new lists
                self.served[place] = scripted.status
        return scripted

    def _unscripted(self, body: dict[str, Any], reject: bool, filtered: str) -> Scripted:
        if filtered and filtered in current_input(user_prompt(body)):
            return refused("content_filter")
        if reject and ("response_format" in body or "tools" in body):
            return Scripted(status=400, content="response_format json_schema and tools are not supported by this "
                                                "server")
        reply = json.dumps(self.reply(role_of(body), user_prompt(body)))
        return tool_call(reply) if "tools" in body else content(reply)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                scripted = stub.answer(body)
                if scripted.delay:
                    time.sleep(scripted.delay)
                if scripted.status == 200 and scripted.body is None and body.get("stream"):
                    self._stream(body, scripted)
                    return
                if scripted.status != 200:
                    payload = {"error": {"message": scripted.content or f"status {scripted.status}",
                                         "type": "invalid_request_error" if scripted.status < 500 else "server_error",
                                         "code": scripted.error_code or scripted.status}}
                elif scripted.body is not None:
                    payload = scripted.body
                else:
                    payload = completion(body, scripted)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(scripted.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in scripted.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    if scripted.trickle:
                        self.wfile.flush()
                        data = self._trickled(data, scripted.trickle)
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a timeout test)
                    pass

            def _trickled(self, data: bytes, every: float) -> bytes:
                """Send the body a byte at a time for at most 6 s; what is left is sent at once."""
                end = time.monotonic() + 6.0
                sent = 0
                while sent < len(data) - 1 and time.monotonic() < end:
                    self.wfile.write(data[sent : sent + 1])
                    self.wfile.flush()
                    sent += 1
                    time.sleep(every)
                return data[sent:]

            def _stream(self, body: dict[str, Any], scripted: Scripted) -> None:
                """Server-sent events: the reply in pieces of 8 characters, then its finish reason and [DONE];
                cut short, the connection closes after `cut` characters with neither."""
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    if scripted.events:
                        for event in stream_events(body, scripted):
                            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                        if scripted.cut is None:
                            self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def stream_events(body: dict[str, Any], scripted: Scripted) -> list[dict[str, Any]]:
    """The chunks of a streamed chat completion: the role, the text (content, or the tool call's arguments)
    in pieces, and a last chunk with the finish reason, unless the reply is cut."""
    whole = completion(body, scripted)
    message, finish = whole["choices"][0]["message"], whole["choices"][0]["finish_reason"]
    calls = message.get("tool_calls") or []
    text = calls[0]["function"]["arguments"] if calls else message.get("content") or ""
    if scripted.cut is not None:
        text = text[: scripted.cut]

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": whole["created"],
                "model": whole["model"], "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}

    if calls:
        first = {"index": 0, "id": calls[0]["id"], "type": "function",
                 "function": {"name": calls[0]["function"]["name"], "arguments": ""}}
        events = [chunk({"role": "assistant", "content": None, "tool_calls": [first]})]
        events += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": text[i : i + 8]}}]})
                   for i in range(0, len(text), 8)]
    else:
        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": text[i : i + 8]}) for i in range(0, len(text), 8)]
    if scripted.cut is None and finish is not None:
        events.append(chunk({}, finish))
    return events


def completion(body: dict[str, Any], scripted: Scripted) -> dict[str, Any]:
    """A chat.completion object, with the reply as content or as a call of the one tool offered."""
    message: dict[str, Any] = {"role": "assistant", "content": scripted.content}
    finish = "stop"
    if scripted.tool_args is not None:
        tools = body.get("tools") or [{"function": {"name": "reply"}}]
        name = tools[0]["function"]["name"]
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": scripted.tool_args}}]}
        finish = "tool_calls"
    finish = None if scripted.no_finish else scripted.finish or finish
    prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    reply_chars = len(scripted.content or scripted.tool_args or "")
    return {
        "id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "stub"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_chars // 4 + 1, "completion_tokens": reply_chars // 4 + 1,
                  "total_tokens": prompt_chars // 4 + reply_chars // 4 + 2},
    }

"""Runtime settings for one graph run (LangGraph's `context_schema`).

Everything a run may vary (whose memory, which model, which embedder, retry and
token budgets, the mode) travels here rather than in globals, so Studio, the
server and an embedding app can each set it per run. Fields not given fall back to
`STRATA_<FIELD>` environment variables, then to the defaults below (see
`_init_noting_what_is_given` for what counts as given).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from functools import lru_cache, wraps
from typing import Any, Literal, get_args, get_type_hints

from pydantic import TypeAdapter, ValidationError
from strata.memory.embeddings import DEFAULT_EMBEDDER
from strata.memory.errors import ConfigError, InputError, not_http_url, shown_value, unstorable
from strata.memory.ledger_sql import LARGEST_INTEGER
from strata.memory.moments import zone_of
from strata.memory.names import blank
from strata.memory.namespaces import check_namespace
from strata.memory.settings import DEFAULT_DATA_DIR, StoreSettings, check_folder, outside_chroma, real_folder

Mode = Literal["ingest", "ask", "chat", "retrieve"]
MODES: tuple[str, ...] = get_args(Mode)
STRUCTURED_OUTPUT = ("auto", "json_schema", "function_calling", "json_mode", "text")


@dataclass(kw_only=True)
class Context:
    """Who the memory belongs to, which backends to use, and how hard to look."""

    namespace: str = field(
        default="default",
        metadata={
            "description": "Whose memory: a user, an agent or a conversation id. Runs never see other namespaces."
        },
    )
    mode: Mode = field(
        default="ask",
        metadata={
            "description": "ingest: store the turns. ask: answer the question without storing it. "
            "chat: store the turn and answer it. retrieve: return the validated evidence, no answer."
        },
    )
    model: str = field(
        default="",
        metadata={
            "description": "Chat model as provider:model (e.g. openai:gpt-4o-mini). Empty or 'offline' uses the "
            "offline policies: no model, no network."
        },
    )
    base_url: str = field(
        default="", metadata={"description": "Base URL of an OpenAI-compatible server (vLLM, Ollama, LM Studio...)."}
    )
    temperature: float = field(default=0.0, metadata={"description": "Sampling temperature of the chat model."})
    structured_output: str = field(
        default="auto",
        metadata={
            "description": "How the model returns each role's JSON: auto (the provider's structured output, e.g. "
            "a JSON schema for OpenAI), json_schema, function_calling, json_mode, or text (the reply's text is "
            "parsed). Unsupported or unusable structured output falls back to the text parser."
        },
    )
    model_timeout: float = field(
        default=60.0, metadata={"description": "Seconds one model call may take before it is abandoned (and retried)."}
    )
    model_retries: int = field(
        default=3,
        metadata={"description": "Tries after the first on a rate limit (429), a server error (5xx), a timeout or "
                  "a dropped connection; then the role falls back to its offline policy."},
    )
    model_backoff: float = field(
        default=1.0,
        metadata={"description": "Seconds before the first retry; doubled for each further one, with jitter. "
                  "A server's Retry-After header is honoured instead."},
    )
    max_model_calls: int = field(
        default=10,
        metadata={"description": "Most model calls (retries included) one question may spend, or one turn while "
                  "storing; past it the roles use their offline policies."},
    )
    embedder: str = field(
        default=DEFAULT_EMBEDDER,
        metadata={"description": "local:all-MiniLM-L6-v2 (ships with the package, offline) or openai:<model>."},
    )
    data_dir: str = field(
        default=DEFAULT_DATA_DIR, metadata={"description": "Folder of the embedded Chroma store and the ledger."}
    )
    chroma_host: str = field(
        default="", metadata={"description": "Chroma server host; empty means embedded Chroma in data_dir."}
    )
    chroma_port: int = field(default=8000, metadata={"description": "Chroma server port."})
    chroma_ssl: bool = field(default=False, metadata={"description": "Use HTTPS for the Chroma server."})
    chroma_auth_header: str = field(
        default="", metadata={"description": "Optional 'Header-Name: value' sent to the Chroma server."}
    )
    ledger_url: str = field(
        default="",
        metadata={
            "description": "PostgreSQL URL (postgresql://user:password@host:5432/db) of the ledger that every "
            "replica shares; empty means a SQLite file in data_dir."
        },
    )
    k_r: int = field(
        default=2,
        metadata={"description": "K_r: at most this many Retry rounds after the first search (AMA default 2)."},
    )
    k_m: int = field(
        default=8,
        metadata={"description": "K_m: the least number of records a search returns; K = max(K_dyn, K_m) (AMA)."},
    )
    token_budget: int = field(
        default=1800, metadata={"description": "Most context tokens the answer is written from."}
    )
    working_size: int = field(
        default=8, metadata={"description": "Recent turns kept per participant in working memory (AdaMem)."}
    )
    episode_max_turns: int = field(
        default=16, metadata={"description": "An episode closes after this many turns even without a topic shift."}
    )
    max_turn_chars: int = field(
        default=40_000,
        metadata={
            "description": "Longest turn stored, in characters (about 6,500 words); a longer one is refused "
            "before anything is written: split it into several turns."
        },
    )
    max_question_chars: int = field(
        default=8_000, metadata={"description": "Longest question asked, in characters; a longer one is refused."}
    )
    timezone: str = field(
        default="",
        metadata={
            "description": "The speakers' time zone (IANA, e.g. America/Denver) for turns whose time names no offset "
            "(UTC 'Z' times, epoch numbers, times without one): their 'yesterday' and their day are read on that "
            "clock. Empty: on UTC. A turn's own offset (-06:00, or utc_offset) always wins."
        },
    )
    owner: str = field(
        default="",
        metadata={
            "description": "Who owns this namespace's memory (a speaker name). Besides the person a memory is "
            "about, only the owner may ask to forget it. Empty: nobody but that person."
        },
    )
    refresher: bool = field(
        default=True, metadata={"description": "Let the Judge call the Refresher on conflicts (off for ablations)."}
    )
    entity_graph: bool = field(
        default=True,
        metadata={"description": "Write entity nodes and entity links (MAGMA 3.2); off for ablations."},
    )
    semantic_links: bool = field(
        default=True,
        metadata={"description": "Write weighted semantic links and evolve neighbours' notes (A-MEM 3.2-3.3)."},
    )
    causal_links: bool = field(
        default=True,
        metadata={"description": "Infer causal links in the slow-path consolidation (MAGMA 3.4)."},
    )
    summaries: bool = field(
        default=True,
        metadata={"description": "Write topic and persona summary records in consolidation (AdaMem)."},
    )
    granularities: str = field(
        default="raw,fact,episode",
        metadata={"description": "Granularities research may search, comma separated (ablations: 'raw' only...)."},
    )
    traversal: bool = field(
        default=True,
        metadata={"description": "Walk the typed links from the first search's anchors (MAGMA); off for ablations."},
    )
    judge_filter: bool = field(
        default=True,
        metadata={"description": "The Judge drops irrelevant items before the answer (AMA); off for ablations."},
    )
    brief_turns: bool = field(
        default=True,
        metadata={"description": "Show turns in a context without their small talk (greetings, thanks, praise), so "
                  "the token budget holds more of what was said; off for ablations."},
    )
    refresh_on_read: bool = field(
        default=False,
        metadata={
            "description": "ask/retrieve may change memory when they find a conflict (default: report it only). "
            "ingest and chat always refresh."
        },
    )
    chat_model: Any = field(
        default=None,
        metadata={
            "description": "A LangChain chat model object, for Python apps that build their own (overrides model). "
            "Leave empty in Studio and on the server: a model object cannot travel as JSON; set model instead."
        },
    )

    def __post_init__(self) -> None:
        types = _field_types()
        self.namespace = check_namespace(self.namespace)
        if self.mode not in MODES:
            raise InputError(f"unknown mode {shown_value(self.mode)}: use one of {', '.join(MODES)}")
        source: dict[str, str] = {}  # where each setting came from, for its messages
        for spec in fields(self):
            if spec.name in ("chat_model", "mode"):
                continue
            source[spec.name] = f"setting {spec.name}"
            value = _setting(spec.name, getattr(self, spec.name), types[spec.name], source[spec.name])
            env = os.environ.get(f"STRATA_{spec.name.upper()}")
            if env is not None and env != "" and spec.name not in self._given:
                source[spec.name] = f"STRATA_{spec.name.upper()}"
                value = _setting(spec.name, env, types[spec.name], source[spec.name])
            setattr(self, spec.name, value)
        blank = isinstance(self.chat_model, str) and not self.chat_model.strip()
        if blank or self.chat_model == {}:  # a form's empty field (Studio sends every field): not given
            self.chat_model = None
        if self.chat_model is not None and not callable(getattr(self.chat_model, "invoke", None)):
            raise InputError("chat_model must be a LangChain chat model object: from Studio or the server, set model")
        problem = unstorable(self.owner)  # a name compared with the speakers', as every other name refuses it
        if problem is not None:
            raise ConfigError(f"{source['owner']} {problem}")
        outside_chroma(real_folder(check_folder(self.data_dir)))
        self._check_pinned()  # after the folder's own checks: a NUL or an unencodable name is said as such
        self._check_named()
        for name, (least, most) in _RANGES.items():
            number = getattr(self, name)
            if not least <= number <= most:
                bound = f"from {least} to {most}" if most < _NO_LIMIT else (
                    f"at least {least}" if number < least else f"at most {most} (a 64-bit whole number)")
                raise ConfigError(f"{source[name]} must be {bound}, got {number!r}")
        self._check_wire()
        self._check_used(source)
        zone_of(self.timezone, source["timezone"])
        unknown = set(self.kinds()) - {"raw", "fact", "episode", "summary"}
        if unknown or not self.kinds():
            raise InputError(f"granularities {self.granularities!r}: list some of raw, fact, episode, summary")

    def _check_pinned(self) -> None:
        """With STRATA_PIN_STORAGE (the shipped langgraph.json sets it), where the memory lives is the
        server's to say: a run's context naming another folder, Chroma server or ledger is refused, so a
        caller of the run API cannot write a memory anywhere the server can reach."""
        if not _flag("PIN_STORAGE"):
            return
        defaults = {spec.name: spec.default for spec in fields(self)}
        types = _field_types()
        for name in STORAGE_SETTINGS:
            variable = f"{ENV_PREFIX}{name.upper()}"
            env = os.environ.get(variable)
            server = _setting(name, env, types[name], variable) if env else defaults[name]
            value = getattr(self, name)
            same = (_real_folder(str(value)) == _real_folder(str(server)) if name == "data_dir" else value == server)
            if not same:
                raise ConfigError(f"setting {name} is pinned by {ENV_PREFIX}PIN_STORAGE to {variable} (a server's "
                                  "runs cannot choose where the memory lives): leave it out, or unset the pin")

    def _check_named(self) -> None:
        """With STRATA_REQUIRE_NAMESPACE (the shipped langgraph.json sets it), a run names its memory. The
        server drops a context key it does not know, so `{"namepsace": "ann"}` arrived as no namespace, and
        Ann's turns went to the shared 'default' memory, which any run naming none reads back."""
        if not _flag("REQUIRE_NAMESPACE"):
            return
        if self.namespace == "default" and "namespace" not in self._given and not os.environ.get(
                f"{ENV_PREFIX}NAMESPACE"):
            raise InputError("this server's runs name their memory: set the context's namespace (a user, an agent "
                             "or a conversation id; a misspelt key is dropped by the server before strata sees it)")

    def _check_used(self, source: dict[str, str]) -> None:
        """A setting given that nothing would read is one line, never a default the caller did not ask for: a
        port without a Chroma host opened the embedded folder, a base_url without a model answered offline,
        and a blank owner or time zone meant none. An empty STRATA_<NAME> counts as unset (a .env file's
        `STRATA_OWNER=`), and an empty owner, timezone, host or URL is each one's documented default."""
        for name, fix in _BLANK.items():
            value = getattr(self, name)
            if value and blank(value):
                raise ConfigError(f"{source[name]} is blank (spaces or invisible characters only): {fix}")
        if blank(self.embedder):
            raise ConfigError(f"{source['embedder']} is empty: give {DEFAULT_EMBEDDER} (the default) or "
                              "openai:<model>, or leave it out")
        given = {name for name in source if name in self._given or source[name].startswith(ENV_PREFIX)}
        if not self.chroma_host:
            unused = [name for name in ("chroma_port", "chroma_ssl", "chroma_auth_header") if name in given and (
                getattr(self, name) if name != "chroma_port" else True)]
            if unused:
                raise ConfigError(f"{source[unused[0]]} is set but chroma_host is not, so it would go unused: name "
                                  "the Chroma server (chroma_host, --chroma-host or STRATA_CHROMA_HOST), or "
                                  f"{_leave_out(unused[0], source)} for the embedded Chroma in data_dir")
        if self.base_url and self.chat_model is not None:
            raise ConfigError(f"{source['base_url']} is not used with a chat_model object, which keeps its own: "
                              f"give the object its base URL, or {_leave_out('base_url', source)}")
        if self.base_url and not self.model.strip():
            raise ConfigError(f"{source['base_url']} is set but no model is, so every answer would be offline: name "
                              "the model the server serves (model='openai:NAME', --model or STRATA_MODEL), or "
                              f"{_leave_out('base_url', source)}")

    def _check_wire(self) -> None:
        """The model-call settings: one line naming the setting and what it takes."""
        if self.structured_output not in STRUCTURED_OUTPUT:
            raise InputError(
                f"structured_output {self.structured_output!r}: use one of {', '.join(STRUCTURED_OUTPUT)}"
            )
        limits = {"model_timeout": 0.0, "model_retries": 0, "model_backoff": 0.0, "max_model_calls": 1}
        for name, least in limits.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or (
                value < least) or (
                least == 0.0 and name == "model_timeout" and value == 0
            ):
                need = "a positive number" if name == "model_timeout" else f"a number of at least {least}"
                raise InputError(f"{name} must be {need}, got {value!r}")
            if isinstance(least, int) and not float(value).is_integer():
                raise InputError(f"{name} must be a whole number, got {value!r}")
        if self.model_timeout > MAX_MODEL_TIMEOUT:  # past ~1e9 the HTTP client's clock overflowed: every call
            raise InputError(  # failed at once and each role fell back offline, blaming the model's reply
                f"model_timeout must be at most {MAX_MODEL_TIMEOUT:g} seconds (a day), got {self.model_timeout:g}: "
                f"for no practical limit give {MAX_MODEL_TIMEOUT:g}")
        if self.model_retries > MAX_MODEL_RETRIES:
            raise InputError(f"model_retries must be from 0 to {MAX_MODEL_RETRIES}, got {self.model_retries!r}: "
                             "max_model_calls caps the calls of a question anyway")
        if not (math.isfinite(self.temperature) and 0.0 <= self.temperature <= MAX_TEMPERATURE):
            raise InputError(f"temperature must be from 0 to {MAX_TEMPERATURE:g} (what chat models take), "
                             f"got {self.temperature!r}")
        wrong = not_http_url(self.base_url) if self.base_url.strip() else None
        if wrong:  # else every call failed and answers went offline
            raise ConfigError(f"base_url is not an http(s) URL ({wrong}): give http(s)://host[:port]/path, e.g. "
                              "http://localhost:8000/v1 (its value is not shown, in case it is a key)")
        name, colon, _ = self.chroma_auth_header.partition(":")
        if self.chroma_auth_header and not (colon and name.strip()):
            raise ConfigError("chroma_auth_header must be 'Name: value' (e.g. 'X-Chroma-Token: secret'), got a "
                              "value with no header name and colon")

    def kinds(self) -> list[str]:
        return [k.strip() for k in self.granularities.split(",") if k.strip()]

    def store_settings(self) -> StoreSettings:
        return StoreSettings(
            data_dir=self.data_dir,
            chroma_host=self.chroma_host or None,
            chroma_port=self.chroma_port,
            chroma_ssl=self.chroma_ssl,
            chroma_auth_header=self.chroma_auth_header or None,
            ledger_url=self.ledger_url or None,
            embedder=self.embedder,
        )

    def offline(self) -> bool:
        return self.chat_model is None and self.model.strip().lower() in ("", "offline")


_GENERATED_INIT = Context.__init__


@wraps(_GENERATED_INIT)
def _init_noting_what_is_given(self: Context, *args: Any, _given: frozenset[str] | None = None, **kwargs: Any) -> None:
    """The dataclass's own __init__, after noting which fields count as given: only the others fall back to
    STRATA_<FIELD>. A run's context (Studio, the server, a dict) names them by value: one equal to its
    default counts as not given, since a form sends every field. The Python API (`Memory`) names them
    itself (`_given`), so `data_dir='.strata'` there is that folder, whatever STRATA_DATA_DIR says.
    `dataclasses.replace` builds a new Context by value: a Memory's context replaced that way falls back to
    the variables for its defaults (`Memory.context(mode, **overrides)` keeps what was given)."""
    if _given is not None and not (isinstance(_given, frozenset) and all(isinstance(n, str) for n in _given)):
        raise InputError("unknown setting(s) '_given': a run's context names settings only")  # JSON has no sets
    defaults = {spec.name: spec.default for spec in fields(Context)}
    unknown = sorted(set(kwargs) - set(defaults))
    if unknown:  # a run's context from a form or a dict: said in one line, as Memory(...) says it
        raise InputError(f"unknown setting(s) {', '.join(map(shown_value, unknown))}: use some of "
                         f"{', '.join(sorted(defaults))}")
    if _given is None:
        _given = frozenset(name for name, value in kwargs.items() if name not in defaults or value != defaults[name])
    self._given = _given
    _GENERATED_INIT(self, *args, **kwargs)


Context.__init__ = _init_noting_what_is_given  # type: ignore[method-assign]


def _leave_out(name: str, source: dict[str, str]) -> str:
    """How to stop giving a setting: unset its variable, or leave it out of the call."""
    return f"unset {source[name]}" if source[name].startswith(ENV_PREFIX) else f"leave {name} out"


def _flag(name: str) -> bool:
    """A server's switch, STRATA_<name>: true or false, anything else refused in one line."""
    flag = (os.environ.get(f"{ENV_PREFIX}{name}") or "").strip().lower()
    if flag not in _TRUE | _FALSE:
        raise ConfigError(f"{ENV_PREFIX}{name}={flag!r}: set it to true or false")
    return flag in _TRUE


_NO_LIMIT = LARGEST_INTEGER  # what the ledger can store
ENV_PREFIX = "STRATA_"
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"", "0", "false", "no", "off"}
# Where the memory lives: what STRATA_PIN_STORAGE keeps a run's context from choosing.
STORAGE_SETTINGS = ("data_dir", "chroma_host", "chroma_port", "chroma_ssl", "chroma_auth_header", "ledger_url")
# Retry rounds a question may take: each costs a Judge and a sub-question call with a model, and a few
# graph steps (thousands would pass LangGraph's step limit mid-question). AMA uses 2.
MAX_RETRY_ROUNDS = 20
# The model's wire: a call may last up to a day (a slow local model), and be tried again up to 100 times (each
# retry waits up to BACKOFF_CEILING, agents/wire.py), far past what a question's max_model_calls lets it spend.
MAX_MODEL_TIMEOUT = 86_400.0
MAX_MODEL_RETRIES = 100
# Least and most values of the numeric settings; a setting not listed takes any number of its type.
MAX_TEMPERATURE = 2.0  # the highest sampling temperature chat APIs take (OpenAI's; Anthropic's stops at 1)
_RANGES: dict[str, tuple[int, int]] = {
    "k_r": (0, MAX_RETRY_ROUNDS), "k_m": (1, _NO_LIMIT), "token_budget": (1, _NO_LIMIT), "working_size": (1, _NO_LIMIT),
    "episode_max_turns": (1, _NO_LIMIT), "chroma_port": (1, 65535), "max_turn_chars": (1, _NO_LIMIT),
    "max_question_chars": (1, _NO_LIMIT),
}  # fmt: skip
# Text settings whose empty value means a default: given blank but not empty, each is refused with what to give.
_BLANK = {
    "owner": "give the owner's name, or leave it empty for no owner",
    "timezone": "give an IANA zone such as America/Denver, or leave it empty for UTC",
    "chroma_host": "give the Chroma server's host, or leave it empty for the embedded Chroma in data_dir",
    "chroma_auth_header": "give 'Name: value', or leave it empty",
    "ledger_url": "give a PostgreSQL URL, or leave it empty for the SQLite ledger in data_dir",
    "base_url": "give the server's http(s) URL, or leave it empty",
}
_KIND_WORDS = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}


@lru_cache(maxsize=1)
def _field_types() -> dict[str, Any]:
    """The settings' declared types (the module uses postponed annotations)."""
    return get_type_hints(Context)


@lru_cache(maxsize=32)
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def _setting(name: str, value: object, kind: Any, source: str) -> object:
    """One setting checked against its declared type (pydantic), as a one-line `ConfigError` when wrong.

    Text from the environment or a form is converted ('3' -> 3, 'true' -> True); a number is never text,
    a flag is never a number, and a path object is its path.
    """
    if kind is str and isinstance(value, os.PathLike):
        value = os.fspath(value)
    wrong = isinstance(value, bool) and kind in (int, float)
    if not wrong:
        try:
            return _adapter(kind).validate_python(value)
        except ValidationError:
            pass
    default = next(f.default for f in fields(Context) if f.name == name)
    what = _KIND_WORDS.get(kind, f"one of {', '.join(map(str, get_args(kind)))}" if get_args(kind) else str(kind))
    raise ConfigError(f"{source} must be {what}, got {shown_value(value)}: e.g. {name}={default!r}")


def _real_folder(name: str) -> str:
    """A folder's one real path, as the store settings resolve it (`real_folder`)."""
    try:
        return real_folder(name)
    except (OSError, RuntimeError, ValueError):  # a link loop, a NUL: compared as written
        return name

"""``brewkb.toml``: nested frozen dataclasses with a default for every key.

Loading checks every value against its field's type and constraints and names
the key path in the error (``search.width: expected an integer ≥ 1, got
'three'``). API keys never live in the file: ``llm.api_key_env`` names the
environment variable that holds one (``OPENAI_API_KEY`` by default).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brewkb.errors import ConfigError

__all__ = ["CONFIG_FILE", "TOOL_NAME", "Config", "KBConfig", "LLMConfig", "RoleConfig", "RolesConfig", "Price",
           "EnvConfig", "AgentConfig", "ExecutorConfig", "RetrievalConfig", "Boosts", "SearchConfig", "StagesConfig",
           "ScrubConfig", "ServeConfig", "ToolsConfig", "Signatures", "load_config", "parse_config", "DEFAULT_TOML",
           "as_dict"]

CONFIG_FILE = "brewkb.toml"
TOOL_NAME = re.compile(r"(?![^\n]*\d{4})[A-Za-z_][A-Za-z0-9_.-]{0,63}")
"""What a tool name (and an argument name) is, matched whole: a letter or ``_``, then letters, digits,
``_``, ``.`` or ``-``, at most 64 characters, and no run of four digits (names do not hold one; card
numbers, phones and ids do). Log readers refuse any other; ``tools.known`` lists only such names."""
Signatures = typing.Mapping[str, frozenset[str] | None]
"""The agent's tools as a team lists them: name → the names of its arguments (``None``: any)."""
_NAME = TOOL_NAME.pattern.replace(r"[^\n]", r"[^\n(),]")
_SIGNATURE = re.compile(rf"{_NAME}(?:\(\s*(?:{_NAME}(?:\s*,\s*{_NAME})*)?\s*,?\s*\))?")


def _min(value: float) -> dict[str, Any]:
    return {"min": value}


def _choices(*values: str) -> dict[str, Any]:
    return {"choices": values}


@dataclass(frozen=True)
class KBConfig:
    recipes_dir: str = "recipes"
    """Folder of the recipe files, relative to the repository root."""
    runs_dir: str = "runs"
    cache_dir: str = ".brewkb"
    """Indexes, the LLM cache and logs; git-ignored."""
    rubric_file: str = ""
    """Markdown file of behaviour rubrics for the judge; empty: brewkb's default."""
    max_recipe_kb: int = field(default=256, metadata=_min(1))
    """A recipe file larger than this is reported by ``brewkb lint`` and left out of the index."""


@dataclass(frozen=True)
class RoleConfig:
    model: str = ""
    """Empty: ``llm.model``."""
    temperature: float = field(default=0.1, metadata=_min(0.0))
    max_tokens: int = field(default=2048, metadata=_min(1))
    base_url: str = ""
    """Empty: ``llm.base_url``."""
    structured_output: str = field(default="", metadata=_choices("", "auto", "json_schema", "json_object", "text"))
    """Empty: ``llm.structured_output``."""


@dataclass(frozen=True)
class RolesConfig:
    agent: RoleConfig = RoleConfig()
    reflector: RoleConfig = RoleConfig()
    integrator: RoleConfig = RoleConfig(temperature=0.7, max_tokens=4096)
    relabeller: RoleConfig = RoleConfig()
    judge: RoleConfig = RoleConfig()
    user: RoleConfig = RoleConfig(temperature=0.0)
    """The user simulator of conversational environments (τ²); 0.0 as in τ²."""
    embeddings: RoleConfig = RoleConfig()
    """Empty model: ``$OPENAI_EMBEDDINGS_MODEL``, else text-embedding-3-small on
    the OpenAI API, else the one model the server lists (never ``llm.model``)."""


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float = field(default=0.0, metadata=_min(0.0))
    output: float = field(default=0.0, metadata=_min(0.0))


@dataclass(frozen=True)
class LLMConfig:
    backend: str = field(default="offline", metadata=_choices("offline", "openai"))
    base_url: str = ""
    """Empty: ``OPENAI_BASE_URL`` from the environment, else the SDK's default."""
    api_key_env: str = "OPENAI_API_KEY"
    model: str = ""
    """Empty: ``$OPENAI_MODEL``, else gpt-4o-mini on the OpenAI API, else the
    one model a server given by ``base_url`` lists (docs/llm.md)."""
    concurrency: int = field(default=8, metadata=_min(1))
    timeout: float = field(default=120.0, metadata=_min(0.001))
    max_retries: int = field(default=4, metadata=_min(0))
    cache: bool = True
    seed: int = 0
    structured_output: str = field(default="auto", metadata=_choices("auto", "json_schema", "json_object", "text"))
    """How JSON replies are asked for: ``auto`` starts with ``json_schema`` and
    falls back to ``json_object`` then ``text`` when an endpoint rejects it."""
    roles: RolesConfig = RolesConfig()
    prices: dict[str, Price] = field(default_factory=dict)
    """Per model name; a model without a price has cost 0 in the ledger."""


@dataclass(frozen=True)
class EnvConfig:
    name: str = "shop"
    seed: int = 0
    data: str = ""
    """Dataset folder for environments that load one."""
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentConfig:
    name: str = "shop-scripted"
    command: tuple[str, ...] = ()
    """argv of the ``command`` adapter (never run through a shell)."""
    entry: str = ""
    """``module:function`` of the ``python`` adapter."""
    timeout: float = field(default=300.0, metadata=_min(0.001))
    max_steps: int = field(default=30, metadata=_min(1))
    max_output_bytes: int = field(default=16_000_000, metadata=_min(1))
    seed: int = 0


@dataclass(frozen=True)
class ExecutorConfig:
    name: str = field(default="local", metadata=_choices("local", "ray"))
    """``local``: a pool on this machine; ``ray``: a Ray cluster (``pip install 'ray>=2.9'``)."""
    workers: int = field(default=2, metadata=_min(1))
    """Episodes in flight at once (threads, or asyncio tasks for LLM agents)."""
    address: str = ""
    """Ray cluster address; empty: start a local Ray."""


@dataclass(frozen=True)
class Boosts:
    """Weights of BM25 scores added up: ``text`` over the whole recipe,
    ``summary`` over its name, concept, aliases and description, each other
    over that part alone (0 leaves a field out of the index and the query).
    ``name`` and ``aliases`` count by default: they say what a recipe is for
    (docs/retrieval.md measures what that gains and costs)."""

    text: float = field(default=1.0, metadata=_min(0.0))
    summary: float = field(default=0.0, metadata=_min(0.0))
    name: float = field(default=1.0, metadata=_min(0.0))
    concept: float = field(default=0.0, metadata=_min(0.0))
    aliases: float = field(default=1.0, metadata=_min(0.0))
    description: float = field(default=0.0, metadata=_min(0.0))
    tags: float = field(default=0.0, metadata=_min(0.0))
    body: float = field(default=0.0, metadata=_min(0.0))
    anchors: float = field(default=1.0, metadata=_min(0.0))
    """The best-matching anchor (a request the recipe quotes), scored on its own."""


@dataclass(frozen=True)
class RetrievalConfig:
    k: int = field(default=3, metadata=_min(1))
    context_tokens: int = field(default=1500, metadata=_min(1))
    """Budget of the rendered context block, in approximate tokens."""
    boosts: Boosts = Boosts()
    per_turn: bool = False
    """In conversational environments (τ²), retrieve again after each user
    turn, with the user's turns so far as the query."""
    mode: str = field(default="bm25", metadata=_choices("bm25", "hybrid"))
    """``hybrid`` fuses the BM25 ranking with dense vectors of the ``embeddings`` role."""
    exemplars: bool = True
    """Show a recipe's exemplar (the calls of a past conversation that passed)
    when the request closely matches that conversation's request."""
    exemplar_similarity: float = field(default=0.5, metadata=_min(0.0))
    """How close is close: the cosine of the request's and the anchor's
    idf-weighted terms."""


@dataclass(frozen=True)
class SearchConfig:
    strategy: str = field(default="mcts", metadata=_choices("mcts", "greedy", "iterative"))
    iterations: int = field(default=10, metadata=_min(1))
    width: int = field(default=3, metadata=_min(1))
    depth: int = field(default=3, metadata=_min(1))
    samples: int = field(default=3, metadata=_min(1))
    """Integrator samples per expansion (h)."""
    exploration: float = field(default=math.sqrt(2), metadata=_min(0.0))
    lambda_corr: float = field(default=0.5, metadata=_min(0.0))
    lambda_ret: float = field(default=0.5, metadata=_min(0.0))
    reuse: int = field(default=1, metadata=_min(0))
    """Reuse an agent episode when a task gets the same context again: 0 off,
    n keeps up to n episodes per (task, context)."""
    final_candidates: int = field(default=2, metadata=_min(1))
    """Nodes per tree (best own reward first) re-evaluated under the final KB."""
    min_gain: float = 0.0
    """A candidate replaces a recipe's base version only if its final reward is more than the base's plus this."""


@dataclass(frozen=True)
class StagesConfig:
    relabel: bool = True
    """Hindsight relabelling of failing trajectories."""
    concepts_per_trajectory: int = field(default=2, metadata=_min(1))
    concept_threshold: float = field(default=0.6, metadata=_min(0.0))
    """Cosine similarity at or above which two concept names are one concept."""
    min_concept_insights: int = field(default=2, metadata=_min(1))
    """A meta-concept with fewer insights merges into the nearest concept of the same
    action, with a note (``brewkb concepts`` reports it); without one it keeps its own recipe."""
    min_concept_tasks: int = field(default=2, metadata=_min(1))
    """A concept learned from logs needs conversations that passed (or whose outcome is unknown) and did
    something for it (its write, or handed its request to a person), of at least this many distinct
    tasks, one with its own write; the others are dropped, with a note (not applied to ``refine``)."""
    concepts_per_task: float = field(default=0.5, metadata=_min(0.0))
    """At most this many concepts per distinct learning task (rounded up, at least one); beyond it the
    concepts with the least support are dropped, with a note. ``distill --plan`` states the bound."""
    integrate_retries: int = field(default=2, metadata=_min(0))
    """New samples asked for when an integrated recipe does not parse or lint."""
    seed: int = 0
    accept_failed: bool = False
    """Go on past a stage some of whose items failed (the PR says which), and
    past a search episode whose reflection failed (a warning says so); by
    default the command stops there, and running it again retries only them."""


@dataclass(frozen=True)
class ScrubConfig:
    enabled: bool = True
    """Replace personal data in trajectories by typed placeholders before reflection."""
    patterns: dict[str, str] = field(default_factory=dict)
    """Placeholder kind → regex, added to the defaults (a kind that exists is
    replaced; an empty regex turns a default off)."""
    keys: tuple[str, ...] = ()
    """JSON keys of tool calls and results whose values are personal, added to the defaults."""
    max_text: int = 20_000
    """Characters one text of an imported trajectory keeps (a message, a tool
    result, each string of a JSON one); the rest is cut at import."""


@dataclass(frozen=True)
class ToolsConfig:
    """The agent's own tools (docs/security.md#the-agents-tools)."""

    known: tuple[str, ...] = ()
    """The tools the agent has, each as its name (``cancel_order``) or its name and the names of its
    arguments (``cancel_order(order_id, reason)``). When set, a concept learned from logs is the action
    of one of them, a procedure step calls one of them (a step calling any other is left out), a call
    passes only the arguments listed for its tool, and ``lint`` reports a recipe that does otherwise.
    Empty: whatever tools and arguments the logs name."""

    @functools.cached_property
    def signatures(self) -> dict[str, frozenset[str] | None]:
        """Tool name → the argument names listed for it (``None``: any)."""
        found: dict[str, frozenset[str] | None] = {}
        for entry in self.known:
            name, _, rest = entry.partition("(")
            found[name.strip()] = frozenset(a.strip() for a in rest.rstrip(") ").split(",") if a.strip()) \
                if rest else None
        return found


@dataclass(frozen=True)
class ServeConfig:
    """``brewkb serve``, the OpenAI-compatible proxy (docs/serve.md)."""

    upstream: str = "https://api.openai.com/v1"
    """Base URL of the endpoint the agents' requests go on to (``--upstream``)."""
    placement: str = field(default="system", metadata=_choices("system", "message", "user"))
    """Where the recipes go: at the end of the client's system prompt (``system``), as
    a system message of their own after it (``message``), or at the end of the last user
    message (``user``)."""
    concurrency: int = field(default=128, metadata=_min(1))
    """Requests forwarded at once; the next ones wait."""
    queue: int = field(default=1024, metadata=_min(0))
    """Requests that may wait for a slot; one more is answered 503."""
    connect_timeout: float = field(default=10.0, metadata=_min(0.001))
    body_timeout: float = field(default=60.0, metadata=_min(0.001))
    """Seconds a client has to send its whole request body (then 408)."""
    read_timeout: float = field(default=600.0, metadata=_min(0.001))
    """Seconds the upstream may stay silent (before its answer, or between two chunks)."""
    refresh_seconds: float = field(default=5.0, metadata=_min(0.01))
    """How often the served branch is checked for a new revision."""
    conversations: int = field(default=4096, metadata=_min(1))
    """Conversations remembered to group turns by their history."""
    flush_seconds: float = field(default=5.0, metadata=_min(0.01))
    """A conversation is written when it has had no turn for this long (and at exit)."""
    grace_seconds: float = field(default=30.0, metadata=_min(0.0))
    """On SIGTERM, how long requests in flight may take to finish."""
    max_request_mb: int = field(default=64, metadata=_min(1))


@dataclass(frozen=True)
class Config:
    kb: KBConfig = KBConfig()
    llm: LLMConfig = LLMConfig()
    env: EnvConfig = EnvConfig()
    agent: AgentConfig = AgentConfig()
    executor: ExecutorConfig = ExecutorConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    stages: StagesConfig = StagesConfig()
    search: SearchConfig = SearchConfig()
    scrub: ScrubConfig = ScrubConfig()
    serve: ServeConfig = ServeConfig()
    tools: ToolsConfig = ToolsConfig()


_FORBIDDEN = {"llm.api_key": "keys do not belong in brewkb.toml; export OPENAI_API_KEY "
                             "(or name another variable with llm.api_key_env)"}


def _describe(tp: Any, meta: typing.Mapping[str, Any]) -> str:
    if "choices" in meta:
        return "one of " + ", ".join(repr(c) for c in meta["choices"])
    names = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}
    text = names.get(tp, getattr(tp, "__name__", str(tp)))
    if "min" in meta:
        text += f" ≥ {meta['min']:g}"
    return text


def _convert(value: Any, tp: Any, meta: typing.Mapping[str, Any], path: str,
             default: Any = None) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a table, got {value!r}")
        return _build(tp, value, path, default)
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: expected a list of strings, got {value!r}")
        return tuple(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a table, got {value!r}")
        inner = typing.get_args(tp)[1]
        if inner is Any:
            return dict(value)
        return {k: _convert(v, inner, {}, f"{path}.{k}") for k, v in value.items()}
    ok = (
        (tp is bool and isinstance(value, bool))
        or (tp is int and isinstance(value, int) and not isinstance(value, bool))
        or (tp is float and isinstance(value, int | float) and not isinstance(value, bool))
        or (tp is str and isinstance(value, str))
    )
    if ok and tp is float and not math.isfinite(value):
        ok = False
    if ok and "min" in meta and value < meta["min"]:
        ok = False
    if ok and "choices" in meta and value not in meta["choices"]:
        ok = False
    if not ok:
        raise ConfigError(f"{path}: expected {_describe(tp, meta)}, got {value!r}")
    return float(value) if tp is float else value


def _build(cls: Any, data: dict[str, Any], prefix: str, base: Any = None) -> Any:
    """``base`` with the values of ``data``: a partial table keeps the defaults
    of its parent (``[llm.roles.integrator]`` keeps temperature 0.7)."""
    base = cls() if base is None else base
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if path in _FORBIDDEN:
            raise ConfigError(f"{path}: {_FORBIDDEN[path]}")
        if key not in fields:
            known = ", ".join(fields)
            raise ConfigError(f"{path}: unknown key; known keys here: {known}")
        values[key] = _convert(value, hints[key], fields[key].metadata, path, getattr(base, key))
    return dataclasses.replace(base, **values)


def parse_config(text: str, source: str = CONFIG_FILE) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        again = " (set it where the file has it already: `brewkb init` writes every table)" if "twice" in str(exc) \
            else ""
        raise ConfigError(f"{source}: not valid TOML ({exc}){again}; fix the syntax") from None
    config = _build(Config, data, "")
    # anchors alone would never find a recipe that quotes no request
    if not any(v for k, v in dataclasses.asdict(config.retrieval.boosts).items() if k != "anchors"):
        raise ConfigError("retrieval.boosts: every boost is 0, so no recipe could ever be found; "
                          "set retrieval.boosts.text = 1")
    bad = [entry for entry in config.tools.known if not _SIGNATURE.fullmatch(entry)]
    if bad:
        what = "is not a tool" if len(bad) == 1 else "are not tools"
        raise ConfigError(f"tools.known: {', '.join(map(repr, bad))} {what}; list your agent's tools as it calls "
                          "them, each a name (letters, digits, _, . and -), or a name and its arguments: "
                          '"cancel_order(order_id, reason)"')
    if config.retrieval.per_turn and config.executor.name == "ray":
        # the per-turn retriever travels in each job, and it is not made to be pickled to Ray workers
        raise ConfigError('retrieval.per_turn: not available with executor.name = "ray"; '
                          'use executor.name = "local" or set retrieval.per_turn = false')
    return config


def load_config(root: Path, environ: typing.Mapping[str, str] | None = None) -> Config:
    """The config of the KB at ``root``; defaults when it has no ``brewkb.toml``.
    ``BREWKB_LLM_BACKEND`` in the environment overrides ``llm.backend`` (so CI
    can use an endpoint only when its secrets exist)."""
    path = root / CONFIG_FILE
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: a byte-order mark is not TOML
    except FileNotFoundError:
        text = ""
    try:
        config = parse_config(text, str(path))
    except ConfigError as exc:
        message = str(exc)
        if not message.startswith(str(path)):
            message = f"{path}: {message}"
        raise ConfigError(message) from None
    backend = (os.environ if environ is None else environ).get("BREWKB_LLM_BACKEND")
    if backend:
        llm = _build(LLMConfig, {"backend": backend}, "BREWKB_LLM_BACKEND → llm", config.llm)
        config = dataclasses.replace(config, llm=llm)
    return config


def as_dict(config: Any) -> Any:
    """A plain dict of a config value (for snapshots and ``--json``)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: as_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, dict):
        return {k: as_dict(v) for k, v in config.items()}
    if isinstance(config, tuple):
        return list(config)
    return config


DEFAULT_TOML = """\
# brewkb configuration. Every key is optional; the values below are the defaults.
# Reference: docs/config.md

[kb]
recipes_dir = "recipes"
runs_dir = "runs"
cache_dir = ".brewkb"
rubric_file = ""          # empty: brewkb's built-in behaviour rubrics
max_recipe_kb = 256       # larger recipe files are reported by `brewkb lint` and left out of the index

[llm]
backend = "offline"       # "offline" (deterministic rules, no model) or "openai"
base_url = ""             # empty: $OPENAI_BASE_URL, else the SDK default
api_key_env = "OPENAI_API_KEY"   # the key itself is never written to a file
model = ""                # empty: $OPENAI_MODEL, else the one model the server serves (gpt-4o-mini on OpenAI)
concurrency = 8
cache = true

[llm.roles.integrator]
temperature = 0.7         # every other role defaults to 0.1

[env]
name = "shop"
seed = 0

[agent]
name = "shop-scripted"
max_steps = 30

[executor]
name = "local"            # or "ray" (pip install 'ray>=2.9'), with address = "ray://..."
workers = 2

[retrieval]
k = 3
context_tokens = 1500
per_turn = false          # true: retrieve again after each user turn (conversational environments)
mode = "bm25"             # "hybrid": BM25 fused with vectors of the embeddings role

[search]
strategy = "mcts"         # "mcts", "greedy" or "iterative"
iterations = 10
width = 3
depth = 3
lambda_corr = 0.5
lambda_ret = 0.5

[scrub]
enabled = true            # personal data → <email>, <user_id>, ... before reflection
# patterns = { employee_id = 'EMP-\\d{6}' }   # added to the default patterns (a TOML literal string)
# keys = ["badge_id"]                          # JSON keys whose values are personal

[tools]
# your agent's tools, each a name or a name and its arguments: no step calls others (docs/security.md)
# known = ["find_order(order_id)", "cancel_order"]
"""

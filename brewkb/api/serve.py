"""``serve`` apart from HTTP: the KB revision served and the recipes a
conversation gets, the serve run its conversations are recorded into, and the
server's status. ``brewkb.serve`` (the HTTP server) calls it the way the CLI
calls the API.

The revision: ``--rev`` (a branch, tag or commit), by default the branch
checked out when the server starts. A branch is followed: ``refresh`` (which
the server calls every ``serve.refresh_seconds``, in a worker thread) builds
the index of its new head and then swaps it in, so a request is answered by
one revision from start to end and none waits for the swap.

The query: the text of the conversation's user messages, in order, up to
``QUERY_CHARS`` characters. The system prompt is the same for every
conversation of an agent and would find the same recipes for all of them;
tool results are data, not a request. Within a conversation the query (and so
the recipes) changes only when the user says something new, so an agent's
tool-calling turns get the same block and the provider's prompt cache keeps
the conversation.

The run: ``--run RUN``, or by default ``serve-<revision>``, which moves with
the revision; a run that ``distill`` has begun takes no more conversations, and
the server goes on in the next free name (``serve-<revision>-2`` ...). A run's
folder is made when its first conversation is written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.errors import GitError, RunError
from brewkb.git.refs import check_run_id
from brewkb.kb import KB
from brewkb.retrieval.context import RecipeContext
from brewkb.retrieval.ranking import open_index
from brewkb.run.folder import Run
from brewkb.run.recordings import Recorder, Turn
from brewkb.trajectories.formats.serve import text_of_content

__all__ = ["Serving", "Served", "query_of", "inject", "QUERY_CHARS"]

log = logging.getLogger(__name__)

QUERY_CHARS = 4000
CONTEXTS_KEPT = 1024
"""Rendered blocks kept per revision (an agent's tool-calling turns ask the same query again)."""
SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True)
class Served:
    """What one request is given."""

    revision: str
    recipes: tuple[str, ...]
    block: str


class Revision:
    """One KB revision being served, with its index and the blocks it rendered."""

    def __init__(self, commit: str, context: RecipeContext) -> None:
        self.commit, self._context = commit, context
        self._blocks: OrderedDict[str, Served] = OrderedDict()

    def serve(self, query: str) -> Served:
        served = self._blocks.get(query)
        if served is None:
            block, use = self._context.context(query) if query.strip() else ("", None)
            served = Served(self.commit, use.recipes if use else (), block)
            self._blocks[query] = served
            if len(self._blocks) > CONTEXTS_KEPT:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(query)
        return served


def query_of(messages: Sequence[Any]) -> str:
    """The retrieval query of a conversation (see the module docstring)."""
    parts: list[str] = []
    size = 0
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == "user":
            text = text_of_content(message.get("content")) or ""
            parts.append(text)
            size += len(text) + 1
            if size >= QUERY_CHARS:
                break
    return "\n".join(parts)[:QUERY_CHARS]


def inject(messages: list[Any], block: str, placement: str) -> list[Any]:
    """The messages to send on: the client's, with ``block`` added where
    ``placement`` says. The client's own messages are never changed in place.

    ``system``: at the end of the client's last leading system (or developer)
    message, after a blank line, so the client's prompt stays the start of what
    the provider sees; a system message of its own at the start when the client
    sends none. ``message``: a system message of its own after the client's
    leading system messages (some chat templates refuse a second system
    message). ``user``: at the end of the last user message (the whole
    history before it stays a stable prefix; the model reads the recipes as the
    user's words)."""
    if not block:
        return messages
    lead = 0
    while lead < len(messages) and isinstance(messages[lead], Mapping) and \
            messages[lead].get("role") in SYSTEM_ROLES:
        lead += 1
    if placement == "user":
        last = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], Mapping)
                     and messages[i].get("role") == "user"), None)
        if last is not None:
            return [*messages[:last], _appended(messages[last], block), *messages[last + 1:]]
    if placement == "system" and lead:
        return [*messages[:lead - 1], _appended(messages[lead - 1], block), *messages[lead:]]
    return [*messages[:lead], {"role": "system", "content": block}, *messages[lead:]]


def _appended(message: Mapping[str, Any], block: str) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": "\n\n" + block}]}
    text = text_of_content(content) or ""
    return {**message, "content": f"{text}\n\n{block}" if text else block}


class Serving:
    """The served KB and the recording of one server process."""

    def __init__(self, kb: KB, rev: str | None, run: str | None) -> None:
        self.kb, self.config = kb, kb.config
        self.ref = _branch_of(kb, rev)
        """The branch followed (``None``: a fixed revision)."""
        self.pinned_run = run
        self.waits = self.config.retrieval.mode == "hybrid"
        """Whether finding recipes may wait for an endpoint (hybrid retrieval's embeddings)."""
        self.revision = self._open(kb.store.resolve(rev or "HEAD"))
        self.run = self._run_for(self.revision.commit)
        self.recorder = Recorder(self.config)
        self.started = time.time()
        self._refreshing = threading.Lock()
        self._unservable: str | None = None
        self.counts = {"requests": 0, "chat": 0, "errors": 0, "gone": 0, "unrecorded": 0, "revisions": 1}

    @classmethod
    def open(cls, start: Path = Path("."), *, rev: str | None = None, run: str | None = None) -> Serving:
        kb = KB.open(start, require_kb=True)
        try:
            serving = cls(kb, rev, run)
            for line in kb.uncommitted("the server") if rev is None else ():
                log.warning(line)
            return serving
        except BaseException:
            kb.close()
            raise

    def given(self, messages: Sequence[Any]) -> Served:
        """The recipes for a conversation, from the revision served now."""
        return self.revision.serve(query_of(messages))

    def record(self, conversation: str, grouped_by: str, messages: Sequence[Any], response: Mapping[str, Any],
               served: Served, model: str | None, usage: Mapping[str, int], tools: Sequence[str] = ()) -> None:
        self.recorder.add(Turn(conversation, grouped_by, messages, response, served.revision, served.recipes,
                               model, usage, self.run, tuple(tools)))

    def outcomes(self, posted: Sequence[tuple[str, bool | None, float | None]]) -> None:
        """Record outcomes posted for conversations (id, success, score)."""
        self.recorder.outcomes(posted, self.run)

    def refresh(self) -> str | None:
        """Follow the branch and the run (blocking: call it in a worker thread);
        returns what changed, in words, or ``None``."""
        with self._refreshing:
            return self._refresh()

    def _refresh(self) -> str | None:
        said = []
        revision = self.revision
        commit = self.kb.store.read_ref(f"refs/heads/{self.ref}") if self.ref is not None else None
        if commit is not None and commit not in (revision.commit, self._unservable):
            try:
                revision = self._open(commit)
            except Exception:
                self._unservable = commit  # tried once; the branch must move again
                raise
            said.append(f"serving {self.ref} at {commit[:12]}")
        if self.pinned_run is None and (not self.run.id.startswith(f"serve-{revision.commit[:12]}")
                                        or _past_import(self.run)):
            self.run = self._run_for(revision.commit)  # first: a status naming the new revision names its run
            said.append(f"recording into run {self.run.id}")
        if revision is not self.revision:
            self.revision = revision
            self.counts["revisions"] += 1
        return "; ".join(said) or None

    def status(self) -> dict[str, Any]:
        return {"revision": self.revision.commit, "ref": self.ref, "run": self.run.id,
                "journal": str(self.recorder.journal(self.run)), "placement": self.config.serve.placement,
                "uptime": round(time.time() - self.started, 1), **self.counts,
                "recorder": {**self.recorder.counts, "held": self.recorder.held(), "runs": dict(self.recorder.runs)}}

    def close(self) -> None:
        """Write every conversation held and let the KB go."""
        self.recorder.close()
        with self._refreshing:
            self.kb.close()

    def _open(self, commit: str) -> Revision:
        retrieval = self.config.retrieval
        index = open_index(self.kb, commit)
        return Revision(commit, RecipeContext(index, commit, retrieval.k, retrieval.context_tokens))

    def _run_for(self, commit: str) -> Run:
        """The run conversations go to; its folder is made when the first is written."""
        runs = self.kb.runs_dir
        if self.pinned_run is not None:
            try:
                check_run_id(self.pinned_run)
            except GitError as exc:
                raise RunError(str(exc)) from None
            run = Run(self.pinned_run, runs / self.pinned_run)
            _check_servable(run)
            return run
        number = 1
        while True:
            name = f"serve-{commit[:12]}" + (f"-{number}" if number > 1 else "")
            run = Run(name, runs / name)
            if not (_past_import(run) or _foreign(run)):
                return run
            number += 1


def _branch_of(kb: KB, rev: str | None) -> str | None:
    """The branch ``rev`` names (the checked-out one by default), or ``None``."""
    if rev is None:
        try:
            return kb.store.head_branch()
        except GitError:
            return None  # a detached HEAD: that commit, for good
    name = rev.removeprefix("refs/heads/")
    return name if kb.store.read_ref(f"refs/heads/{name}") is not None else None


def _foreign(run: Run) -> str | None:
    """What else a run holds, when it is not a serve run."""
    source = run.manifest()["stages"].get("rollouts", {}).get("source")
    if source is None or source == "import:serve":
        return None
    return "its agent's episodes" if not str(source).startswith("import:") else \
        f"logs imported from {str(source).split(':', 1)[1]}"


def _past_import(run: Run) -> bool:
    manifest = run.manifest()
    return bool(manifest.get("search_spec")) or any(s != "rollouts" for s in manifest["stages"])


def _check_servable(run: Run) -> None:
    held = _foreign(run)
    if held:
        raise RunError(f"run {run.id} holds {held}; record served conversations into a run of their own: "
                       "--run NEW")
    if _past_import(run):
        raise RunError(f"run {run.id} has been distilled, so it takes no more conversations; serve into a new "
                       "--run, or leave --run out to record into serve-<revision>")

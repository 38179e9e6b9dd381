"""The conversations ``brewkb serve`` records, written into serve runs.

A server process writes into ``runs/RUN/serve/`` files of its own, named after
its host, its process id and when it started (``<writer>.jsonl`` and
``<writer>.outcomes.jsonl``), so replicas never share a file. Each line is one
whole append (``fsutil.append_line``): a kill loses at most the line being
written, and the reader skips a line cut short.

A conversation is held in memory while its turns come in and is written —
one trajectory, as it stands after its latest turn — once it has had no turn
for ``serve.flush_seconds``, when more than ``serve.conversations`` are held
(the one idle longest), and when the server stops. A conversation that goes
on after it was written is written again; the reader keeps its latest line.
So a crash loses the conversations in flight, never one already written.

Every trajectory passes ``_admitted`` before it is written: the one place where
what a client sent meets the trust boundary. The recording runs on a thread of
its own, which takes the turns that came in every ``TICK`` (so a request never
wakes it), and the event loop never waits for a disk; the scrubbing, the one
costly part, runs in a process of its own (started at the first write; the
conversations due at one look go to it together, and one by one when that
process ends during a batch, so a conversation that ends it loses only
itself), so the requests never wait for the interpreter's lock either.
That process ignores SIGINT and SIGTERM (a Ctrl-C or a supervisor's signal
reaches the whole process group): the server decides when it ends, after the
last conversation is written.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import signal
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from brewkb.config import Config, ScrubConfig
from brewkb.fsutil import append_line
from brewkb.run.folder import Run
from brewkb.trajectories.boundary import SCRUB_BOUND, admit
from brewkb.trajectories.formats.base import bad_name
from brewkb.trajectories.formats.serve import OUTCOMES_SUFFIX, recorded_message, text_of_content
from brewkb.trajectories.schema import UNKNOWN, KBUse, Trajectory
from brewkb.trajectories.scrub import Scrubber, scrubber_of
from brewkb.trajectories.tools import DECLARED

__all__ = ["Turn", "Recorder", "writer_name", "SERVE_FOLDER"]

log = logging.getLogger(__name__)

SERVE_FOLDER = "serve"
TICK = 0.1
"""Seconds between two looks of the recorder at the turns that came in."""


def writer_name() -> str:
    """This process's files: host, process id and start time."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{time.strftime('%Y%m%d-%H%M%S')}"


@dataclass(frozen=True)
class Turn:
    """One request of a conversation and the answer the client got."""

    conversation: str
    grouped_by: str
    """``header`` (the client named the conversation) or ``history``."""
    messages: Sequence[Any]
    """The messages as the client sent them (without the recipes)."""
    response: Mapping[str, Any]
    """The assistant message of the upstream's answer."""
    revision: str | None
    recipes: tuple[str, ...]
    model: str | None
    usage: Mapping[str, int]
    run: Run
    tools: tuple[str, ...] = ()
    """The names of the tools the request declared to the model."""
    time: float = field(default_factory=time.time)


@dataclass
class _Held:
    run: Run
    latest: Turn | None
    """``None`` once written: a turn that comes later brings the whole history again."""
    turns: dict[int, dict[str, Any]]
    seen: float


_SCRUBBER: tuple[Scrubber, int] | None = None
"""The admitting process's scrubber and longest text."""


def _start_admitting(scrub: ScrubConfig) -> None:
    global _SCRUBBER
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    _SCRUBBER = (scrubber_of(scrub), scrub.max_text)


def _admitted(conversations: Sequence[tuple[Turn, dict[int, dict[str, Any]]]]) -> list[str | Exception | None]:
    """Each conversation's line (its latest turn and what each turn was given)
    as it may be written, ``None`` when it may not, or what went wrong: every recorded
    conversation passes here. Its messages must be chat messages and its tool
    and argument names identifiers; the rest goes through the trust boundary
    (``admit``)."""
    assert _SCRUBBER is not None
    lines: list[str | Exception | None] = []
    for turn, turns in conversations:
        try:
            trajectory = _trajectory(turn, turns)
            admitted = None if trajectory is None or bad_name(trajectory.messages) is not None \
                else admit(trajectory, *_SCRUBBER)
            lines.append(None if admitted is None else admitted.to_line())
        except Exception as exc:  # one odd conversation never stops the recording of the others
            lines.append(exc)
    return lines


def _cut(message: Any, longest: int) -> Any:
    """``message`` with its text content, the texts of its content parts and its calls' arguments cut to
    ``longest`` characters (as ``admit`` cuts them before scrubbing; a cut call's arguments are no JSON)."""
    if not isinstance(message, Mapping):
        return message
    out = dict(message)
    content = out.get("content")
    if isinstance(content, str) and len(content) > longest:
        out["content"] = content[:longest]
    elif isinstance(content, list):
        out["content"] = [{**part, "text": part["text"][:longest]}
                          if isinstance(part, Mapping) and isinstance(part.get("text"), str) else part
                          for part in content]
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_cut_arguments(call, longest) for call in calls]
    return out


def _cut_arguments(call: Any, longest: int) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):
        return call
    return {**call, "function": {**function, "arguments": function["arguments"][:longest]}}


class Recorder:
    """Turns in, trajectories out to the runs' files, on a thread of its own.
    ``add`` never blocks; ``close`` writes every conversation held and waits."""

    def __init__(self, config: Config, writer: str | None = None) -> None:
        self.config = config
        self.writer = writer or writer_name()
        self.keep = config.serve.conversations
        self.idle = config.serve.flush_seconds
        self._turns: deque[Turn] = deque()
        self._stop = threading.Event()
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._runs: OrderedDict[str, Run] = OrderedDict()  # conversation -> its run, for outcomes
        self._lock = threading.Lock()
        self._begun: set[str] = set()  # runs whose manifest this process has seen marked
        # pending: conversations with turns not written yet
        self.counts = {"turns": 0, "written": 0, "refused": 0, "failed": 0, "outcomes": 0, "pending": 0}
        self.runs: dict[str, int] = {}
        """Conversations written into each run (a server that follows its branch moves on to new runs)."""
        self._admitting: ProcessPoolExecutor | None = None
        self._thread = threading.Thread(target=self._work, name="brewkb-recorder", daemon=True)
        self._thread.start()

    def journal(self, run: Run) -> Path:
        return run.path / SERVE_FOLDER / f"{self.writer}.jsonl"

    def add(self, turn: Turn) -> None:
        self._turns.append(turn)  # taken within TICK: the requests' thread never wakes the recorder

    def outcomes(self, posted: Sequence[tuple[str, bool | None, float | None]], run: Run) -> None:
        """Append posted outcomes (conversation id, success, score), each to the
        file of its conversation's run (``run`` when this process never recorded it)."""
        for conversation, success, score in posted:
            with self._lock:
                into = self._runs.get(conversation, run)
            self._begin(into)
            append_line(into.path / SERVE_FOLDER / f"{self.writer}{OUTCOMES_SUFFIX}",
                        json.dumps({"conversation_id": conversation, "success": success, "score": score,
                                    "time": time.time()}))
            self.counts["outcomes"] += 1

    def _begin(self, run: Run) -> None:
        """Mark a run this process writes into as a serve run, once: its manifest
        says what it holds, and ``distill`` takes it as imported logs."""
        with self._lock:
            if run.id not in self._begun and not run.stage_done("rollouts"):
                run.record_stage("rollouts", source="import:serve", file=str(run.path / SERVE_FOLDER),
                                 trajectories=0, skipped=0, unlabelled=0)
            self._begun.add(run.id)

    def held(self) -> int:
        return len(self._held)

    def close(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._admitting is not None:
            self._admitting.shutdown(wait=not self._thread.is_alive(), cancel_futures=True)

    def _admit(self, conversations: Sequence[tuple[Turn, dict[int, dict[str, Any]]]]
               ) -> list[str | Exception | None]:
        """The lines of ``conversations``, from the scrubbing process: one exchange for all of them."""
        if self._admitting is None:
            self._admitting = ProcessPoolExecutor(1, multiprocessing.get_context("spawn"), _start_admitting,
                                                  (self.config.scrub,))
        try:
            return self._admitting.submit(_admitted, conversations).result()
        except BrokenProcessPool:
            self._admitting = None  # the next write starts another
            raise RuntimeError("the process that scrubs recordings ended; the next conversation starts another")

    def _work(self) -> None:
        last = time.monotonic()
        while True:
            stopping = self._stop.wait(TICK)
            due: list[_Held] = []
            while self._turns:
                turn = self._turns.popleft()
                try:
                    due.extend(self._take(turn))
                except Exception as exc:  # one odd turn never stops the recording of the others
                    self.counts["failed"] += 1
                    log.error("a turn of conversation %s not recorded: %s", turn.conversation, exc)
            now = time.monotonic()
            if stopping:
                due.extend(self._held.values())
                self._held.clear()
            elif now - last >= min(self.idle, 1.0) / 2:
                last = now
                for held in self._held.values():
                    if now - held.seen < self.idle:
                        break  # the rest came in later
                    due.append(held)
            self._write(due)
            if stopping:
                return

    def _take(self, turn: Turn) -> list[_Held]:
        """Hold ``turn``, its texts cut to the longest the trust boundary reads (a client's megabytes are not held
        for the minutes a conversation may last); returns the conversations that must be written to make room."""
        self.counts["turns"] += 1
        longest = self.config.scrub.max_text * SCRUB_BOUND
        turn = replace(turn, messages=[_cut(m, longest) for m in turn.messages], response=_cut(turn.response, longest))
        held = self._held.pop(turn.conversation, None)
        at = len(turn.messages)
        info = {"at": at, "revision": turn.revision, "recipes": list(turn.recipes), "model": turn.model,
                "usage": dict(turn.usage), "tools": list(turn.tools), "time": round(turn.time, 3)}
        if held is None:
            held = _Held(turn.run, None, {}, 0.0)
        self.counts["pending"] += held.latest is None
        held.turns = {k: v for k, v in held.turns.items() if k < at}  # a turn asked again replaces the later ones
        held.turns[at] = info
        held.latest, held.seen = turn, time.monotonic()
        self._held[turn.conversation] = held
        with self._lock:
            self._runs[turn.conversation] = held.run
            self._runs.move_to_end(turn.conversation)
            while len(self._runs) > self.keep:
                self._runs.popitem(last=False)
        room = []
        while len(self._held) > self.keep:
            room.append(self._held.popitem(last=False)[1])
        return room

    def _write(self, due: Sequence[_Held]) -> None:
        """Write the conversations ``due`` as they stand (one already written and
        not gone on since is skipped), scrubbed together."""
        taken = []
        for held in due:
            turn, held.latest = held.latest, None
            if turn is not None:  # else written already, and nothing came since
                self.counts["pending"] -= 1
                taken.append((held.run, turn, held.turns))
        if not taken:
            return
        lines = self._lines([(turn, turns) for _, turn, turns in taken])
        for (run, turn, _), line in zip(taken, lines, strict=True):
            if line is None:
                self._refused(turn)
                continue
            problem = line if isinstance(line, Exception) else self._append(run, line)
            if problem is not None:
                self.counts["failed"] += 1
                log.error("conversation %s not recorded: %s", turn.conversation, problem)

    def _append(self, run: Run, line: str) -> Exception | None:
        """Append one conversation's line to this process's file of ``run``; what went wrong, if anything."""
        try:
            self._begin(run)
            append_line(self.journal(run), line)
        except Exception as exc:  # the server goes on; what it could not write is said and counted
            return exc
        self.counts["written"] += 1
        self.runs[run.id] = self.runs.get(run.id, 0) + 1
        return None

    def _lines(self, conversations: Sequence[tuple[Turn, dict[int, dict[str, Any]]]]
               ) -> list[str | Exception | None]:
        """``_admit``, and when the scrubbing process ends during a batch, each
        conversation of it alone: one that ends the process loses only itself."""
        try:
            return self._admit(conversations)
        except Exception as exc:
            if len(conversations) == 1:
                return [exc]
            log.warning("%s; scrubbing its %d conversations one by one", exc, len(conversations))
            return [self._lines([one])[0] for one in conversations]

    def _refused(self, turn: Turn) -> None:
        self.counts["refused"] += 1
        log.warning("conversation %s not recorded: a message is not a chat message or a tool name is "
                    "not an identifier", turn.conversation)


def _trajectory(turn: Turn, held: dict[int, dict[str, Any]]) -> Trajectory | None:
    messages = [recorded_message(m) for m in (*turn.messages, turn.response)]
    if any(m is None for m in messages):
        return None
    kept = [m for m in messages if m is not None]
    turns = [held[at] for at in sorted(held)]
    task = next((text_of_content(m.get("content")) or "" for m in kept if m["role"] == "user"), "")
    usage = {key: sum(int(t["usage"].get(key) or 0) for t in turns)
             for key in ("prompt_tokens", "completion_tokens", "total_tokens")}
    recipes = tuple(dict.fromkeys(r for t in turns for r in t["recipes"]))
    models = sorted({t["model"] for t in turns if t["model"]})
    declared = sorted({name for t in turns for name in t.get("tools", ())})
    return Trajectory(task_id=turn.conversation, task=task, messages=tuple(kept), outcome=UNKNOWN,
                      kb=KBUse(turn.revision, recipes), usage={**usage, "calls": len(turns)},
                      meta={"source": "serve", "conversation_id": turn.conversation, "grouped_by": turn.grouped_by,
                            "turns": turns, "models": models, **({DECLARED: declared} if declared else {})})

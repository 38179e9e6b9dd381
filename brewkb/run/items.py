"""How a stage's items persist: each finished item is appended to
``<stage>.partial.jsonl`` at once, a failed one is recorded in
``failures.jsonl`` and run again by the same command, and a stage's output
file is written whole when every item is done (see ``brewkb.run.pipeline``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from brewkb.aio import gather_all
from brewkb.config import Config
from brewkb.errors import AllFailedError, LLMError, PartlyFailedError
from brewkb.events import Event, EventSink
from brewkb.fsutil import append_line, write_atomic
from brewkb.llm.ledger import ITEM
from brewkb.run.folder import FILES, Run

__all__ = ["StageItems", "RETRY", "NOUNS"]

NOUNS = {"grades": "grades", "relabel-tasks": "relabelled tasks", "reflections": "reflections",
         "integrate": "recipes"}
RETRY = "fix the cause and run the same command again: finished items are kept and only the failed ones run"


class StageItems:
    """The item bookkeeping of ``Pipeline``."""

    run: Run
    config: Config
    events: EventSink
    retry: str

    def _partial_path(self, stage: str) -> Path:
        return self.run.file(f"{stage}.partial.jsonl")

    def _partial(self, stage: str) -> dict[str, Any]:
        done: dict[str, Any] = {}
        path = self._partial_path(stage)
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a kill; its item runs again
                if isinstance(record["value"], dict) and "failed" in record["value"]:
                    continue  # a failure kept by an earlier brewkb: retried
                done[record["key"]] = record["value"]
        return done

    def _record(self, stage: str, key: str, value: Any) -> None:
        append_line(self._partial_path(stage), json.dumps({"key": key, "value": value}, ensure_ascii=False))

    def _failure(self, stage: str, key: str, error: str) -> None:
        append_line(self.run.file("failures.jsonl"), json.dumps({"stage": stage, "key": key, "error": error}))
        self.events(Event("item_failed", stage, message=f"{key}: {error}"))

    def _finish(self, stage: str, lines: Iterable[str], started: float, **info: Any) -> None:
        write_atomic(self.run.file(FILES[stage]), "".join(line + "\n" for line in lines))
        self._partial_path(stage).unlink(missing_ok=True)
        seconds = round(time.monotonic() - started, 3)
        self.run.record_stage(stage, seconds=seconds, **info)
        self.events(Event("stage_finished", stage, message=f"in {seconds:.1f} s", data=info))

    def _skip(self, stage: str) -> bool:
        if self.run.stage_done(stage) and self.run.file(FILES[stage]).exists():
            self.events(Event("stage_skipped", stage, message="already done"))
            return True
        return False

    def _episodes_failed(self, stage: str, errors: Sequence[str], total: int) -> None:
        """Say how many of the ``total`` episodes run failed to run; raise when all did,
        or when some did and ``stages.accept_failed`` is off."""
        if errors and len(errors) == total:
            append_line(self.run.file("failures.jsonl"), json.dumps({"stage": stage, "key": "episodes",
                                                                     "count": total, "error": errors[0]}))
            raise AllFailedError(f"all {total} episodes failed to run: {errors[0]}; {self.retry}")
        if errors:
            self.events(Event("note", stage, message=f"{len(errors)} of {total} episodes failed to run (agent "
                                                     f"or endpoint errors); the first: {errors[0]}"))
            if not self.config.stages.accept_failed:
                append_line(self.run.file("failures.jsonl"), json.dumps({"stage": stage, "key": "episodes",
                                                                         "count": len(errors), "error": errors[0]}))
                raise self._partly(stage, len(errors), total, "episodes failed to run", errors[0])

    def _partly(self, stage: str, failed: int, total: int, what: str, first: str) -> PartlyFailedError:
        return PartlyFailedError(f"{failed} of {total} {what} in stage {stage} (the first: {first}); the other "
                                 f"{total - failed} are kept. {self.retry[:1].upper()}{self.retry[1:]}; or set "
                                 "stages.accept_failed = true in brewkb.toml to go on without them (the pull "
                                 "request will list them)")

    async def _map(self, stage: str, keys: Sequence[str], work: Callable[[str], Awaitable[Any]]) -> dict[str, Any]:
        """Run ``work`` on every key not already done; persist each good result.
        Failed items stay unpersisted, so running again retries them."""
        done = self._partial(stage)
        todo = [k for k in keys if k not in done]
        self.events(Event("stage_started", stage, done=len(keys) - len(todo), total=len(keys)))
        limit = asyncio.Semaphore(max(1, self.config.llm.concurrency))
        errors: list[str] = []

        async def one(key: str) -> None:
            async with limit:
                ITEM.set(f"{stage}:{key}")  # labels the invalid replies this item's calls get
                try:
                    value = await work(key)
                except LLMError as exc:
                    self._failure(stage, key, str(exc))
                    errors.append(str(exc))
                    value = {"failed": str(exc)}
                else:
                    self._record(stage, key, value)
            done[key] = value
            self.events(Event("item_done", stage, done=len(done), total=len(keys)))

        await gather_all(one(k) for k in todo)
        accept = self.config.stages.accept_failed  # goes on unless no item of the stage ever succeeded
        if errors and len(errors) == len(todo) and (len(todo) == len(keys) or not accept):
            left = " left" if len(todo) < len(keys) else ""
            raise AllFailedError(f"all {len(todo)} {NOUNS.get(stage, 'items')}{left} failed: {errors[0]}; "
                                 f"{self.retry}")
        if errors and not accept:
            raise self._partly(stage, len(errors), len(todo), f"{NOUNS.get(stage, 'items')} failed", errors[0])
        if errors:
            self.events(Event("note", stage, message=f"{len(errors)} of {len(keys)} {NOUNS.get(stage, 'items')} "
                                                     f"failed; the first: {errors[0]}"))
        return {k: done[k] for k in keys}

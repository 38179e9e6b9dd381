"""Run folders: ``runs/<run-id>/`` with a config snapshot, a manifest of stage
status, one JSONL per stage, the event log and the LLM ledger.

Every write is atomic. The manifest says which stages finished, with their
counts and timings; a stage whose output is recorded there is not run again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.errors import RunError
from brewkb.fsutil import write_atomic
from brewkb.git.refs import check_run_id
from brewkb.trajectories.schema import Trajectory, read_jsonl, write_jsonl

__all__ = ["Run", "new_run_id", "STAGES", "FILES", "LOCK"]

log = logging.getLogger(__name__)
LOCK = "run.lock"

MANIFEST = "manifest.json"
STAGES = ("rollouts", "rollouts-eval", "grades", "relabel", "reflections", "concepts", "integrate")
FILES = {"rollouts": "rollouts.jsonl", "rollouts-eval": "rollouts-eval.jsonl", "grades": "grades.jsonl",
         "relabel": "relabelled.jsonl", "reflections": "reflections.jsonl", "concepts": "concepts.json",
         "integrate": "integrated.jsonl", "outcomes": "outcomes.jsonl"}


def new_run_id(prefix: str = "run") -> str:
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"


@dataclass(frozen=True)
class Run:
    id: str
    path: Path

    @classmethod
    def at(cls, runs_dir: Path, run_id: str, *, create: bool = False) -> Run:
        try:
            check_run_id(run_id)
        except Exception as exc:
            raise RunError(str(exc)) from None
        path = runs_dir / run_id
        if not path.is_dir():
            if not create:
                known = sorted(p.name for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
                raise RunError(f"no run {run_id!r} in {runs_dir}; runs: {', '.join(known) or 'none'}")
            path.mkdir(parents=True)
        return cls(run_id, path)

    def file(self, name: str) -> Path:
        return self.path / name

    @contextlib.contextmanager
    def lock(self, command: str) -> Iterator[None]:
        """Hold ``run.lock`` (naming this process) while ``command`` works on
        the run. A lock whose process is gone is removed with a warning; one
        held by a live process (or by another machine) refuses the start."""
        path = self.file(LOCK)
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "since": int(time.time())}
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                held = _read_owner(path)
                if held is not None and held.get("host") == owner["host"] and not _alive(int(held.get("pid", 0))):
                    log.warning("removed the stale lock %s of %s (process %s is gone)", path, held.get("command"),
                                held.get("pid"))
                    path.unlink(missing_ok=True)
                    continue
                who = f"process {held.get('pid')} on {held.get('host')} ({held.get('command')})" if held else \
                    "a process whose lock file is unreadable"
                raise RunError(f"run {self.id} is in use by {who}; wait for it to finish, or delete {path} "
                               "if that process is gone") from None
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(json.dumps(owner) + "\n")
            break
        try:
            yield
        finally:
            path.unlink(missing_ok=True)

    def manifest(self) -> dict[str, Any]:
        try:
            return json.loads(self.file(MANIFEST).read_text(encoding="utf-8"))  # type: ignore[no-any-return]
        except FileNotFoundError:
            return {"run": self.id, "stages": {}}
        except json.JSONDecodeError as exc:
            raise RunError(f"{self.file(MANIFEST)} is not JSON ({exc.msg}); restore it from git or delete "
                           "the run folder") from None

    def record_stage(self, stage: str, **info: Any) -> None:
        stages = self.manifest().get("stages", {})
        stages[stage] = {**info, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
        self.set_manifest("stages", stages)

    def set_manifest(self, key: str, value: Any) -> None:
        manifest = self.manifest()
        manifest[key] = value
        write_atomic(self.file(MANIFEST), json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    def stage_done(self, stage: str) -> bool:
        return stage in self.manifest().get("stages", {})

    def read_trajectories(self, name: str) -> list[Trajectory]:
        path = self.file(name)
        return list(read_jsonl(path)) if path.exists() else []

    def write_trajectories(self, name: str, trajectories: Iterable[Trajectory]) -> int:
        return write_jsonl(self.file(name), trajectories)


def _read_owner(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True

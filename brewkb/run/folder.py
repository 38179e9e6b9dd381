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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.errors import RunError
from brewkb.fsutil import append_line, write_atomic
from brewkb.git.refs import check_run_id
from brewkb.trajectories.schema import Trajectory, read_jsonl, write_jsonl

__all__ = ["Run", "Journal", "new_run_id", "holder", "STAGES", "FILES", "LOCK", "MANIFEST", "LOG_EVAL_FILE",
           "BUDGET_SPENT"]

log = logging.getLogger(__name__)
LOCK = "run.lock"
LOG_EVAL_FILE = "eval-logs.json"
"""A comparison on held-out logs (``distill``'s own, or ``eval --logs --run``)."""
BUDGET_SPENT = "budget_spent"
"""The manifest key naming the limit that stopped a refine (``--max-llm-calls``), while it is stopped."""

MANIFEST = "manifest.json"
RESTORE = ("restore it (`git checkout -- FILE` if you commit runs/, or from a backup), or delete {folder} and run "
           "the run again")
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
        _refuse_links(runs_dir, runs_dir.parent, "; to keep runs elsewhere, set kb.runs_dir in brewkb.toml")
        _refuse_links(path, runs_dir)
        if not path.is_dir():
            if not create:
                known = sorted(p.name for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
                raise RunError(f"no run {run_id!r} in {runs_dir}; runs: {', '.join(known) or 'none'}")
            path.mkdir(parents=True)
        for entry in os.scandir(path):
            _refuse_links(Path(entry.path), path)
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
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(json.dumps(owner) + "\n")
            except BaseException:  # e.g. a full disk: no lock without its owner is left behind
                path.unlink(missing_ok=True)
                raise
            break
        try:
            yield
        finally:
            path.unlink(missing_ok=True)

    def manifest(self) -> dict[str, Any]:
        path = self.file(MANIFEST)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"run": self.id, "stages": {}}
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            problem = str(exc) if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
            raise RunError(f"{path} is not JSON ({problem}); {RESTORE.format(folder=self.path)}") from None
        except IsADirectoryError:
            raise RunError(f"{path} is a folder, not the run's manifest; remove it or delete the run folder") from None
        spec = data.get("search_spec") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("stages", {}), dict) or (
                spec is not None and not (isinstance(spec, dict) and isinstance(spec.get("base"), str)
                                          and isinstance(spec.get("spec"), dict))):
            raise RunError(f"{path} is damaged (not the object brewkb writes: a `stages` table and a "
                           f"`search_spec` with `base` and `spec`); {RESTORE.format(folder=self.path)}")
        data.setdefault("stages", {})
        return data

    def record_stage(self, stage: str, **info: Any) -> None:
        stages = self.manifest().get("stages", {})
        stages[stage] = {**info, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
        self.set_manifest("stages", stages)

    def set_manifest(self, key: str, value: Any) -> None:
        manifest = self.manifest()
        manifest[key] = value
        write_atomic(self.file(MANIFEST), json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    def imported_from(self) -> str | None:
        """The log format its trajectories were imported from (``tau-bench``,
        ``openai`` ...); ``None`` when they are its agent's episodes, or it has none yet."""
        source = str(self.manifest()["stages"].get("rollouts", {}).get("source", ""))
        return source.split(":", 1)[1] if source.startswith("import:") else None

    def ran_an_agent(self) -> bool:
        """Whether its trajectories are its agent's episodes (a refine run)."""
        return self.stage_done("rollouts") and self.imported_from() is None

    def stage_done(self, stage: str) -> bool:
        return stage in self.manifest().get("stages", {})

    def read_trajectories(self, name: str) -> list[Trajectory]:
        path = self.file(name)
        return list(read_jsonl(path)) if path.exists() else []

    def write_trajectories(self, name: str, trajectories: Iterable[Trajectory]) -> int:
        return write_jsonl(self.file(name), trajectories)


def _refuse_links(path: Path, parent: Path, hint: str = "") -> None:
    """Refuse ``path`` when it is a link that leads out of ``parent``: brewkb
    writes into run folders and would write through it (a committed
    ``runs/RUN/plots`` pointing at another folder)."""
    if path.is_symlink() and not path.resolve().is_relative_to(parent.resolve()):
        raise RunError(f"{path} is a link to {path.resolve()}, outside {parent}; brewkb writes into run folders "
                       f"and does not follow links out of them: replace the link with a folder of its own{hint}")


def holder(lock: Path) -> dict[str, Any] | None:
    """Who holds the run lock ``lock`` (``pid``, ``host``, ``command``), or ``None`` when no live process does."""
    held = _read_owner(lock) if lock.exists() else None
    if held is None or held.get("host") == socket.gethostname() and not _alive(int(held.get("pid", 0))):
        return None
    return held


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


class Journal:
    """Episodes of one step by key, appended as each finishes, so a step that
    a crash interrupted runs only the episodes it had not finished (and counts
    none twice against a budget). ``on_put`` hears how many are kept."""

    def __init__(self, path: Path, on_put: Callable[[int], None] | None = None) -> None:
        self.path, self.on_put = path, on_put
        self.done: dict[str, Trajectory] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                    self.done[str(record["key"])] = Trajectory.from_json(record["trajectory"])
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue  # a line cut short by a crash or a full disk: its episode runs again

    def get(self, key: str) -> Trajectory | None:
        return self.done.get(key)

    def put(self, key: str, trajectory: Trajectory) -> None:
        append_line(self.path, json.dumps({"key": key, "trajectory": trajectory.to_json()}))
        self.done[key] = trajectory
        if self.on_put is not None:
            self.on_put(len(self.done))

    def close(self) -> None:
        """Forget the journal once its step's result is saved."""
        self.path.unlink(missing_ok=True)

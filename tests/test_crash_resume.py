"""A crash changes nothing: `brewkb refine` killed with SIGKILL right after
any of its progress events, or stopped by a full disk, then resumed, ends with
exactly the refs, notes, held-out evaluation and spent budget of the run that
was never interrupted."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git

# module fixtures start before the autouse fixture that isolates each test: name everything explicitly
IDENTITY = {"GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com", "GIT_AUTHOR_NAME": "Test",
            "GIT_AUTHOR_EMAIL": "test@example.com", "GIT_CONFIG_NOSYSTEM": "1", "PYTHONUNBUFFERED": "1"}
CONFIG = '[env]\nname = "shop"\noptions = { train = 4, eval = 2, test = 2 }\n[search]\niterations = 2\n'
PARTS = 4
CONCURRENCY = 8
"""Episodes in flight at once (the default ``agent.concurrency``)."""
"""The kill points are split in parts so that parallel test workers share them."""


def brewkb(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=root, capture_output=True, text=True,
                          env={**os.environ, **IDENTITY, **env}, timeout=600)


def record(root: Path, run: str = "r") -> dict[str, Any]:
    """What must not depend on a crash: the run's refs, every note, the held-out
    evaluation and the agent episodes the run spent (its budget)."""
    refs = git(root, "for-each-ref", "--format=%(refname) %(objectname)", f"refs/heads/brew/{run}/",
               "refs/notes/brew")
    notes = {}
    for line in git(root, "notes", "--ref", "brew", "list").splitlines():
        blob, commit = line.split()
        notes[commit] = git(root, "cat-file", "-p", blob)
    ledger = (root / "runs" / run / "ledger.jsonl").read_text().splitlines()
    episodes = sum(json.loads(line)["count"] for line in ledger
                   if '"kind": "episode"' in line and '"cached": false' in line)
    return {"refs": refs, "notes": notes, "episodes": episodes,
            "eval": json.loads((root / "runs" / run / "eval.json").read_text())}


def commit_base(root: Path, config: str) -> None:
    """Make ``root`` a KB with ``config`` and no recipe, committed."""
    git(root, "init", "-q", "-b", "main")
    (root / "brewkb.toml").write_text(config)
    (root / "recipes").mkdir()
    (root / "recipes" / ".gitkeep").write_text("")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[dict[str, Any]], int]:
    """A base KB; the record and events of its uninterrupted run, and the room
    (in KB, counted in whole pages as a tmpfs does) its clone takes at the end."""
    top = tmp_path_factory.mktemp("crash")
    base = top / "base"
    base.mkdir()
    whole = top / "whole"
    with pytest.MonkeyPatch.context() as env:
        for key, value in {**IDENTITY, "HOME": str(top), "BREWKB_LOG_DIR": str(top / "logs")}.items():
            env.setenv(key, value)
        commit_base(base, CONFIG)
        git(top, "clone", "-q", str(base), str(whole))
        out = brewkb(whole, "refine", "--run", "r", "--json")
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines() if '"kind"' in line]
    room = sum(4 * -(-path.stat().st_size // 4096) for path in whole.rglob("*") if path.is_file())
    return base, record(whole), events, room


def test_the_kill_points_cover_every_stage_of_the_run(reference: Any) -> None:
    _, _, events, _ = reference
    assert {"rollouts", "rollouts-eval", "grades", "relabel-tasks", "reflections", "integrate", "search",
            "final", "held-out"} <= {e["stage"] for e in events}
    steps = [e["message"] for e in events if e["kind"] == "step"]
    for it in (1, 2):  # a kill may land between any two writes of a search iteration
        mine = [s.split(": ", 1)[1] for s in steps if s.startswith(f"iteration {it}: ")]
        assert [m.split()[-1] for m in mine] == ["expanded", "committed", "evaluated", "noted"], mine


@pytest.mark.parametrize("part", range(PARTS))
def test_a_kill_after_any_event_then_resume_gives_the_same_run(reference: Any, tmp_path: Path, part: int) -> None:
    base, want, events, _ = reference
    for n in range(1 + part, len(events) + 1, PARTS):
        root = tmp_path / f"k{n}"
        git(tmp_path, "clone", "-q", str(base), str(root))
        killed = brewkb(root, "refine", "--run", "r", BREWKB_KILL_AFTER_EVENT=str(n))
        where = f"killed after event {n} ({events[n - 1]['kind']} {events[n - 1]['stage']} " \
                f"{events[n - 1]['message']!r})"
        assert killed.returncode == -9, where
        resumed = brewkb(root, "refine", "--resume", "r")
        assert resumed.returncode == 0, f"{where}: {resumed.stderr}"
        assert "Traceback" not in resumed.stderr and "is missing" not in resumed.stderr, where
        assert record(root) == want, where
        shutil.rmtree(root)


@contextlib.contextmanager
def small_disk(folder: Path, size_kb: int) -> Iterator[tuple[dict[str, Any], Any, bool]]:
    """``folder`` on a file system of ``size_kb``: a tmpfs when mounting is
    allowed (root, as on CI); otherwise each file of the processes started
    with the yielded keywords may grow to an eighth of it (``RLIMIT_FSIZE``).
    Also yields the function that gives the room back, and whether it is a tmpfs."""
    folder.mkdir()
    mounted = shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(folder)], capture_output=True).returncode == 0
    if mounted:
        def grow() -> None:
            subprocess.run(["mount", "-o", "remount,size=65536k", str(folder)], check=True)
        try:
            yield {}, grow, True
        finally:
            subprocess.run(["umount", "-l", str(folder)], check=False)
        return

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size_kb * 128, resource.RLIM_INFINITY))

    yield {"preexec_fn": limit}, lambda: None, False


@pytest.mark.parametrize("share", [0.3, 0.45, 0.6, 0.75, 0.9])
def test_a_full_disk_stops_the_run_in_one_line_and_resume_gives_the_same_run(reference: Any, tmp_path: Path,
                                                                               share: float) -> None:
    """A disk with room for ``share`` of what the whole run writes fills up midway."""
    base, want, _, room = reference
    size_kb = int(room * share)
    with small_disk(tmp_path / "disk", size_kb) as (limited, grow, tmpfs):
        root = tmp_path / "disk" / "kb"
        git(tmp_path, "clone", "-q", str(base), str(root))
        full = subprocess.run([sys.executable, "-m", "brewkb", "refine", "--run", "r"], cwd=root,
                              capture_output=True, text=True, timeout=600, env={**os.environ, **IDENTITY}, **limited)
        assert full.returncode == 1, full.stderr
        [line] = [line for line in full.stderr.splitlines() if line.startswith("brewkb:")]
        if tmpfs:
            assert line.startswith(f"brewkb: error: no space left on the device writing {root}/"), line
            assert line.endswith("free some space, then continue with `brewkb refine --resume r` (finished work "
                                 "is kept)"), line
        else:
            assert line.startswith("brewkb: error: "), line
        assert "Traceback" not in full.stderr
        assert not (root / "runs" / "r" / "run.lock").exists()
        grow()
        resumed = brewkb(root, "refine", "--resume", "r")
        assert resumed.returncode == 0, resumed.stderr
        got = record(root)
        # an episode that finished as the disk filled, but whose result could not
        # be written, runs again and counts again: both runs were spent
        assert want["episodes"] <= got.pop("episodes") <= want["episodes"] + CONCURRENCY
        assert got == {k: v for k, v in want.items() if k != "episodes"}
        git(root, "fsck", "--strict")

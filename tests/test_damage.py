"""Damage a user or a tool can cause is named, and never a crash (exit 3):
what the rest of a run's git record still says is used and put back; what it
does not is one line naming the ref and what to do. Damaged run folders and
LLM caches likewise."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from tests.test_crash_resume import IDENTITY, commit_base

# module fixtures start before the autouse fixture that isolates each test: name everything explicitly
CONFIG = '[env]\nname = "shop"\noptions = { train = 6, eval = 3, test = 3 }\n[search]\niterations = 2\n'
RUN = "refs/heads/brew/r"


def brewkb(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=root, capture_output=True, text=True,
                          env={**os.environ, **IDENTITY}, timeout=600)


def refs(root: Path) -> dict[str, str]:
    out = git(root, "for-each-ref", "--format=%(refname) %(objectname)", f"{RUN}/")
    return dict(line.split() for line in out.splitlines())


def notes(root: Path) -> dict[str, Any]:
    found = {}
    for line in git(root, "notes", "--ref", "brew", "list").splitlines():
        blob, commit = line.split()
        found[commit] = json.loads(git(root, "cat-file", "-p", blob))
    return found


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed KB with no run."""
    top = tmp_path_factory.mktemp("damage")
    root = top / "base"
    root.mkdir()
    with pytest.MonkeyPatch.context() as env:
        for key, value in {**IDENTITY, "HOME": str(top), "BREWKB_LOG_DIR": str(top / "logs")}.items():
            env.setenv(key, value)
        commit_base(root, CONFIG)
    return root


@pytest.fixture(scope="module")
def finished(base: Path) -> Path:
    """A KB with the finished run ``r`` (no held-out evaluation, to be quick)."""
    root = base.parent / "finished"
    with pytest.MonkeyPatch.context() as env:
        for key, value in {**IDENTITY, "HOME": str(base.parent), "BREWKB_LOG_DIR": str(base.parent / "logs")}.items():
            env.setenv(key, value)
        git(base.parent, "clone", "-q", str(base), str(root))
        out = brewkb(root, "refine", "--run", "r", "--no-eval")
    assert out.returncode == 0, out.stderr
    return root


@pytest.fixture
def kb(finished: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "kb"
    shutil.copytree(finished, copy, symlinks=True)
    return copy


def reads_fine(root: Path) -> str:
    """Runs the commands that read a run; returns their stderr."""
    said = ""
    for args in (["tree", "r"], ["pr", "r", "--body-only"], ["report", "r"]):
        out = brewkb(root, *args)
        assert out.returncode == 0, (args, out.stderr)
        said += out.stderr
    return said


def test_a_deleted_node_branch_is_found_again_and_put_back(kb: Path) -> None:
    before = refs(kb)
    node = f"{RUN}/{sorted(r.split('/')[4] for r in before if r.endswith('/n1'))[0]}/n1"
    git(kb, "update-ref", "-d", node)
    said = reads_fine(kb)
    assert f"{node} is missing; found it again in" in said and f"git update-ref {node} {before[node]}" in said
    out = brewkb(kb, "refine", "--resume", "r", "--no-eval")
    assert out.returncode == 0, out.stderr
    assert f"{node} is missing; restored it from" in out.stderr
    assert refs(kb) == before
    assert "missing" not in reads_fine(kb)


def test_a_deleted_root_and_kb_branch_are_rebuilt_exactly(kb: Path) -> None:
    before, noted = refs(kb), notes(kb)
    root = next(r for r in before if r.endswith("/n0"))
    git(kb, "update-ref", "-d", root)
    git(kb, "update-ref", "-d", f"{RUN}/kb")
    said = reads_fine(kb)
    assert f"{root} is missing" in said and f"{RUN}/kb is missing" in said
    out = brewkb(kb, "refine", "--resume", "r", "--no-eval")
    assert out.returncode == 0, out.stderr
    assert "notes are written once" not in out.stderr
    assert refs(kb) == before and notes(kb) == noted  # every gather replayed to the same commit


def test_a_kb_branch_moved_elsewhere_is_rebuilt(kb: Path) -> None:
    before = refs(kb)
    git(kb, "update-ref", f"{RUN}/kb", "main")
    assert f"{RUN}/kb points at" in reads_fine(kb)
    out = brewkb(kb, "refine", "--resume", "r", "--no-eval")
    assert out.returncode == 0, out.stderr
    assert refs(kb) == before


def test_a_malformed_note_is_read_from_the_notes_history_and_put_back(kb: Path) -> None:
    noted = notes(kb)
    node = refs(kb)[next(r for r in refs(kb) if r.endswith("/n2"))]
    git(kb, "notes", "--ref", "brew", "add", "-f", "-m", '{"reward": 0.5', node)
    said = reads_fine(kb)
    assert f"the note on {node[:12]}" in said and "is not a JSON object with a reward" in said
    out = brewkb(kb, "refine", "--resume", "r", "--no-eval")
    assert out.returncode == 0, out.stderr
    assert "restored it from the history of refs/notes/brew" in out.stderr
    assert notes(kb) == noted


def test_a_malformed_note_with_no_history_is_named_with_what_to_do(kb: Path) -> None:
    node = refs(kb)[next(r for r in refs(kb) if r.endswith("/n2"))]
    git(kb, "notes", "--ref", "brew", "add", "-f", "-m", "not json", node)
    # history rewritten: the notes as they are now, as a commit without parents
    tree = git(kb, "rev-parse", "refs/notes/brew^{tree}").strip()
    orphan = git(kb, "-c", "user.name=T", "-c", "user.email=t@e", "commit-tree", tree, "-m", "squashed").strip()
    git(kb, "update-ref", "refs/notes/brew", orphan)
    out = brewkb(kb, "tree", "r")
    assert out.returncode == 0 and "holds no earlier version of it" in out.stderr
    out = brewkb(kb, "refine", "--resume", "r", "--no-eval")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"brewkb: error: the note on {node[:12]} ({RUN}/") and "git fetch REMOTE refs/notes/brew" in line


def test_a_node_branch_pointing_at_another_commit_is_corrected(kb: Path) -> None:
    before = refs(kb)
    node = next(r for r in before if r.endswith("/n1"))
    git(kb, "update-ref", node, "main")
    assert f"{node} points at" in reads_fine(kb)
    out = brewkb(kb, "refine", "--resume", "r", "--no-eval")
    assert out.returncode == 0, out.stderr
    assert refs(kb) == before


def test_branches_deleted_while_the_run_writes_them_are_put_back(base: Path, finished: Path,
                                                                 tmp_path: Path) -> None:
    """``kb`` and a node branch deleted under a running refine: the run ends
    with its whole history, and says what it put back."""
    root = tmp_path / "kb"
    git(tmp_path, "clone", "-q", str(base), str(root))
    want = refs(finished)
    proc = subprocess.Popen([sys.executable, "-m", "brewkb", "refine", "--run", "r", "--no-eval", "--json"],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **IDENTITY})
    assert proc.stdout is not None and proc.stderr is not None
    deleted = []
    for line in proc.stdout:
        if '"iteration 1: candidates committed"' in line and not deleted:
            os.kill(proc.pid, signal.SIGSTOP)  # between two writes of the run
            node = next(r for r in refs(root) if r.endswith("/n1"))
            for ref in (f"{RUN}/kb", node):
                (root / ".git" / ref).unlink()
                deleted.append(ref)
            os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(600) == 0, proc.stderr.read()
    said = proc.stderr.read()
    assert f"{RUN}/kb was deleted while the run was writing it" in said
    assert f"{deleted[1]} was deleted while the run was writing it; put it back" in said
    assert refs(root) == want


@pytest.mark.parametrize("manifest", ['{"run": ', "[]", '{"stages": []}', '{"search_spec": 5}', b"\xff\xfe"])
def test_a_damaged_manifest_is_named_and_leaves_no_lock(kb: Path, manifest: str | bytes) -> None:
    path = kb / "runs" / "r" / "manifest.json"
    path.write_bytes(manifest if isinstance(manifest, bytes) else manifest.encode())
    listed = brewkb(kb, "runs")  # lists it as damaged, and any other runs as they are
    assert listed.returncode == 0 and listed.stdout.startswith(f"{'r':28} damaged: {path} "), listed.stdout
    for args in (["refine", "--resume", "r"], ["distill", "r"], ["rollout", "--run", "r"], ["report", "r"]):
        out = brewkb(kb, *args)
        assert out.returncode == 1, (args, out.stderr)
        assert out.stderr.strip().splitlines()[-1].startswith(f"brewkb: error: {path}"), (args, out.stderr)
        assert not (kb / "runs" / "r" / "run.lock").exists(), args
    assert path.read_bytes() == (manifest if isinstance(manifest, bytes) else manifest.encode())  # changed nothing


def test_a_damaged_llm_cache_is_named_and_cache_clear_removes_it(kb: Path) -> None:
    path = kb / ".brewkb" / "llm-cache.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, kind TEXT NOT NULL, value TEXT NOT NULL, "
                   "created REAL NOT NULL, role TEXT NOT NULL DEFAULT '')")
        db.execute("CREATE TABLE uses (key TEXT NOT NULL, run TEXT NOT NULL, PRIMARY KEY (key, run))")
        db.executemany("INSERT INTO responses VALUES (?, 'chat', ?, 0, 'judge')",
                       [(str(i), "x" * 1000) for i in range(300)])
    with path.open("r+b") as f:  # garbage over the pages after the header
        f.seek(4096)
        f.write(os.urandom(8192))
    out = brewkb(kb, "cache", "stats")
    assert out.returncode == 1 and f"the LLM cache {path} is damaged" in out.stderr
    assert "`brewkb cache clear --yes`" in out.stderr and "Traceback" not in out.stderr
    out = brewkb(kb, "cache", "clear", "--role", "judge", "--yes")
    assert out.returncode == 1 and "is damaged" in out.stderr  # a part of it cannot be told apart
    out = brewkb(kb, "cache", "clear", "--yes")
    assert out.returncode == 0 and "was damaged; deleted it" in out.stderr
    assert not path.exists()
    out = brewkb(kb, "cache", "stats")
    assert out.returncode == 0 and out.stdout.startswith("0 entries")

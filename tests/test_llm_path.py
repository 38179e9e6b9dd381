"""The LLM path end to end: the real CLI in a subprocess, LLM roles and the
tool-calling agent against a scripted OpenAI-compatible endpoint."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from brewkb.api.loop import run_command
from brewkb.errors import BrewError
from brewkb.llm.ledger import read_ledger
from tests.conftest import MakeRepo, git
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.roles import embed, role_player

PACKAGE = Path(__file__).resolve().parents[1] / "brewkb"
TRACEBACK = re.compile(r"Traceback|Task exception was never retrieved|Event loop is closed|never awaited"
                       r"|this is a bug")

SHOP = """\
[llm]
backend = "openai"
[env]
name = "shop"
options = {{ train = 10, eval = 5, test = 6 }}
[agent]
name = "tool-agent"
[search]
strategy = "{strategy}"
iterations = 1
width = 2
depth = 1
samples = 2
"""


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(default=role_player, embed=embed) as fake:
        yield fake


def brewkb(cwd: Path, fake: FakeOpenAI, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout)


def shop_kb(make_repo: MakeRepo, strategy: str = "mcts", extra: str = "", name: str | None = None) -> Path:
    return make_repo({"brewkb.toml": SHOP.format(strategy=strategy) + extra, "recipes/.keep": ""}, name=name)


def assert_clean_run(root: Path, out: subprocess.CompletedProcess[str], run: str) -> None:
    """Exit 0, a PR branch, LLM calls of the agent and the roles in the ledger, no traceback."""
    assert out.returncode == 0, out.stderr[-3000:]
    assert not TRACEBACK.search(out.stderr), out.stderr[-3000:]
    assert git(root, "rev-parse", "--verify", "-q", f"refs/heads/brew/{run}/pr").strip()
    roles = {e.role for e in read_ledger(root / "runs" / run / "ledger.jsonl") if e.kind == "chat" and not e.error}
    assert {"agent", "reflector", "integrator", "judge"} <= roles


def test_no_event_loop_is_started_below_the_api() -> None:
    starters = {"run", "run_until_complete", "new_event_loop", "Runner"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[:1] in (("api",), ("cli",)):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in starters and \
                    isinstance(node.value, ast.Name) and node.value.id == "asyncio":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def test_the_api_refuses_to_nest_in_a_running_loop() -> None:
    async def inner() -> int:
        return 1

    async def outer() -> None:
        coroutine = inner()
        with pytest.raises(BrewError, match="asyncio.to_thread"):
            run_command(coroutine)
        assert coroutine.cr_frame is None  # closed, so no "never awaited" warning

    asyncio.run(outer())
    assert run_command(inner()) == 1


def test_refine_with_the_tool_agent(make_repo: MakeRepo, endpoint: FakeOpenAI) -> None:
    root = shop_kb(make_repo)
    out = brewkb(root, endpoint, "refine", "--run", "r", "--json")
    assert_clean_run(root, out, "r")
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["nodes"] > len(result["concepts"])  # the search made children, not only roots

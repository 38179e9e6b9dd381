"""τ² with the tool agent and the ``user`` role against the fake endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tau2_policies import USER_OPENING, USER_THANKS, Tau2Player, require_tau2, tau2_kb

require_tau2()

from brewkb.llm.ledger import read_ledger  # noqa: E402
from brewkb.trajectories import read_jsonl  # noqa: E402
from tests.conftest import git  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.fakes.roles import embed  # noqa: E402

AIRLINE = """\
[llm]
backend = "openai"
[llm.roles.user]
model = "user-sim"
[env]
name = "tau2"
[env.options]
domain = "airline"
[agent]
name = "tool-agent"
"""


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(default=Tau2Player(), embed=embed) as fake:
        yield fake


def brewkb(cwd: Path, fake: FakeOpenAI, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def test_rollout_writes_graded_conversations_whose_user_turns_come_from_the_user_role(
        tmp_path: Path, endpoint: FakeOpenAI) -> None:
    kb = tau2_kb(tmp_path / "kb", AIRLINE)
    out = brewkb(kb, endpoint, "rollout", "--run", "r", "--split", "train", "--context", "none")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = list(read_jsonl(kb / "runs" / "r" / "rollouts.jsonl"))
    assert len(runs) == 20 and {t.split for t in runs} == {"train"}
    for t in runs:
        assert t.outcome.detail["grader"] == "tau2", t.outcome.detail
        users = [m["content"] for m in t.messages if m["role"] == "user"]
        assert users == [USER_OPENING, USER_THANKS]
        assert t.meta["ended_by"] == "user"
    user_calls = [r for _, r in endpoint.requests if r.get("model") == "user-sim"]
    assert len(user_calls) == 40 and not any(r.get("tools") for r in user_calls)
    assert "<scenario>" in user_calls[0]["messages"][0]["content"]
    roles = {e.role for e in read_ledger(kb / "runs" / "r" / "ledger.jsonl") if e.kind == "chat"}
    assert {"agent", "user"} <= roles
    # A read-only conversation succeeds exactly on the tasks that expect no change and no answer.
    assert 0 < sum(t.success for t in runs) < len(runs)

"""The built-in tool agent on the real SpreadsheetBench sample, end to end through
the real CLI and an OpenAI-compatible endpoint: ``brewkb refine`` ends with a PR branch."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openpyxl")

from brewkb.envs.spreadsheetbench import load_dataset  # noqa: E402
from tests.conftest import MakeRepo, git  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.fakes.roles import RolePlayer, embed  # noqa: E402
from tests.sheets import SAMPLE, SheetPolicy, needs_bwrap  # noqa: E402
from tests.test_llm_path import TRACEBACK, brewkb  # noqa: E402

CONFIG = """\
[llm]
backend = "openai"
[env]
name = "spreadsheetbench"
data = "{data}"
options = {{ train = 0.1, eval = 0.05 }}
[agent]
name = "tool-agent"
[search]
iterations = 1
width = 2
depth = 1
samples = 2
"""


@needs_bwrap
def test_refine_on_the_sample_ends_with_a_pr_branch(make_repo: MakeRepo) -> None:
    root = make_repo({"brewkb.toml": CONFIG.format(data=SAMPLE), "recipes/.keep": ""})
    policy = SheetPolicy({t.id: t for t in load_dataset(SAMPLE)})
    with FakeOpenAI(default=RolePlayer(policy=policy), embed=embed) as fake:
        out = brewkb(root, fake, "refine", "--run", "sheets", "--no-eval", "--json", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert not TRACEBACK.search(out.stderr), out.stderr[-3000:]
    assert git(root, "rev-parse", "--verify", "-q", "refs/heads/brew/sheets/pr").strip()
    rollouts = [json.loads(line) for path in (root / "runs" / "sheets").rglob("*.jsonl") if "rollout" in path.name
                for line in path.read_text().splitlines() if line.strip()]
    graded = [t["outcome"] for t in rollouts if "cases" in t.get("outcome", {}).get("detail", {})]
    assert graded and {o["detail"]["sandbox"] for o in graded} == {"bwrap"}
    assert {o["success"] for o in graded} == {True, False}  # the policy solves half the tasks

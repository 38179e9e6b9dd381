"""What a newcomer meets in the first hour, each through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import MakeRepo, git, recipe_text


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          env=env)


def test_init_commits_its_files_and_refuses_an_uncreatable_folder(tmp_path: Path) -> None:
    result = run(tmp_path, "init", "kb", "--json")
    assert result.returncode == 0, result.stderr
    kb = tmp_path / "kb"
    assert git(kb, "rev-list", "--count", "HEAD").strip() == "1"
    assert git(kb, "status", "--porcelain") == ""
    assert json.loads(result.stdout)["commit"] == git(kb, "rev-parse", "HEAD").strip()
    bad = run(tmp_path, "init", "/proc/nope")
    assert bad.returncode == 1
    assert bad.stderr.strip() == ("brewkb: error: cannot create /proc/nope: No such file or directory; "
                                  "pass a folder you can write to")


def test_init_in_a_repo_with_history_leaves_committing_to_its_owner(make_repo: MakeRepo) -> None:
    repo = make_repo({"notes.txt": "mine\n"})
    assert run(repo, "init", ".").returncode == 0
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"
    assert "?? brewkb.toml" in git(repo, "status", "--porcelain")


def test_python_agent_module_resolves_from_the_kb_folder(tmp_path: Path) -> None:
    assert run(tmp_path, "init", "kb").returncode == 0
    kb = tmp_path / "kb"
    config = (kb / "brewkb.toml").read_text()
    config = config.replace('name = "shop-scripted"', 'name = "python"\nentry = "pyagent:run"')
    config = config.replace('name = "shop"', 'name = "tasks-file"\ndata = "tasks.jsonl"\n'
                            f'options = {{ grader = [{json.dumps(sys.executable)}, "grade.py"] }}')
    (kb / "brewkb.toml").write_text(config)
    (kb / "tasks.jsonl").write_text('{"id": "t1", "task": "say done", "split": "test"}\n')
    (kb / "grade.py").write_text("import json, sys\n"
                                 "request = json.load(sys.stdin)\n"
                                 "print(json.dumps({'success': request['trajectory']['messages'][-1]['content'] == 'done'}))\n")
    (kb / "pyagent.py").write_text(
        "def run(request):\n"
        "    return {'messages': [{'role': 'user', 'content': request['task']},\n"
        "                         {'role': 'assistant', 'content': 'done'}]}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # started from elsewhere: `python -m` would put its own folder on sys.path
    result = run(tmp_path, "-C", "kb", "eval", "--context", "none", "--json", env=env)
    assert result.returncode == 0, result.stderr
    [column] = json.loads(result.stdout)
    assert column["success_rate"] == 1.0


def test_a_crash_inside_a_kb_logs_to_its_cache_folder(tmp_path: Path) -> None:
    assert run(tmp_path, "init", "kb").returncode == 0
    kb = tmp_path / "kb"
    code = ("import brewkb.api\n"
            "def boom(*a, **k):\n    raise ZeroDivisionError('boom')\n"
            "brewkb.api.lint = boom\n"
            "from brewkb.cli.main import main\nmain(['lint'])\n")
    env = {k: v for k, v in os.environ.items() if k != "BREWKB_LOG_DIR"}
    result = subprocess.run([sys.executable, "-c", code], cwd=kb, capture_output=True, text=True, env=env)
    assert result.returncode == 3
    log = Path(result.stderr.split("traceback is in ")[1].split(" — ")[0])
    assert log.parent == (kb / ".brewkb" / "logs").resolve()
    assert "ZeroDivisionError: boom" in log.read_text()
    assert git(kb, "status", "--porcelain") == ""

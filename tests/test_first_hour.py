"""What a newcomer meets in the first hour, each through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert run(tmp_path, "init", "loose", "--no-commit").returncode == 0
    assert "?? brewkb.toml" in git(tmp_path / "loose", "status", "--porcelain")
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


FIXTURES = Path(__file__).parent / "fixtures"


def test_import_runs_gc_and_runs_speak_of_what_a_run_needs(tmp_path: Path) -> None:
    assert run(tmp_path, "init", "kb").returncode == 0
    kb = tmp_path / "kb"
    source = str(FIXTURES / "tau2-results.json")
    bogus = run(kb, "import", source, "--format", "tau2", "--split", "bogus")
    assert bogus.returncode == 2 and "'bogus' is not one of 'train', 'eval'." in bogus.stderr
    assert not (kb / "runs" / "import-tau2-results").exists()
    assert run(kb, "import", source, "--format", "tau2", "--run", "imp").returncode == 0
    gc = run(kb, "gc", "imp", "--json")
    assert gc.returncode == 0, gc.stderr
    assert json.loads(gc.stdout) == {"run": "imp", "deleted": 0}
    assert run(kb, "gc", "nope").returncode == 1
    # a refine stopped after it recorded its search: everything but the search is done
    manifest = json.loads((kb / "runs" / "imp" / "manifest.json").read_text())
    manifest["stages"].update({s: {} for s in ("grades", "relabel", "reflections", "concepts", "integrate")})
    stopped = kb / "runs" / "stopped"
    stopped.mkdir()
    (stopped / "manifest.json").write_text(json.dumps({**manifest, "search_spec": {"base": "x", "spec": {}}}))
    listed = run(kb, "runs")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split(None, 1)[1] == "1/7 stages (next: grades; run: brewkb distill imp), 0 failed items"
    assert lines[1].split(None, 1)[1] == ("6/7 stages (stopped before search finished; continue: "
                                          "brewkb refine --resume stopped), 0 failed items")
    data = json.loads(run(kb, "runs", "--json").stdout)
    assert [r["next"] for r in data] == ["grades", "search"]


def test_show_suggests_names_that_exist(tmp_path: Path, make_repo: MakeRepo) -> None:
    assert run(tmp_path, "init", "kb").returncode == 0
    empty = run(tmp_path / "kb", "show", "nope")
    assert empty.returncode == 1
    assert empty.stderr.strip().endswith("there are no recipes yet: write one in recipes/, learn them with "
                                         "`brewkb distill RUN` (logs) or `brewkb refine`, or read a run's with "
                                         "`--rev brew/RUN/pr`")
    repo = make_repo({"recipes/pay.md": recipe_text("pay"), "recipes/refund.md": recipe_text("refund")})
    assert run(repo, "show", "nope").stderr.strip().endswith("; recipes: pay, refund")
    assert run(repo, "show", "refnd").stderr.strip().endswith("; did you mean refund?")


def test_a_name_that_is_not_its_file_name(tmp_path: Path) -> None:
    assert run(tmp_path, "init", "kb").returncode == 0
    kb = tmp_path / "kb"
    (kb / "recipes" / "baggage.md").write_text(recipe_text("Baggage Allowance", "Checked bags allowed per fare"))
    (kb / "recipes" / "seats.md").write_text(recipe_text("seat-change", "Change a seat"))
    lint = run(kb, "lint", "--json")
    fixes = {(p["path"], p["message"]): p["hint"] for p in json.loads(lint.stdout)}
    assert fixes[("recipes/baggage.md", "name 'Baggage Allowance' differs from the file name 'baggage'")] == (
        "rename the file to baggage-allowance.md and set `name: baggage-allowance`, or set `name: baggage`")
    assert fixes[("recipes/seats.md", "name 'seat-change' differs from the file name 'seats'")] == (
        "rename the file to seat-change.md or set `name: seats`")
    # until lint's fix is applied, every reader skips them, and says why
    (kb / "recipes" / "pay.md").write_text(recipe_text("pay", "Pay an order"))
    skipped = run(kb, "show", "baggage")
    assert skipped.returncode == 1
    assert skipped.stderr.strip().endswith("recipes/baggage.md was skipped because its front matter is not valid "
                                           "or its name is not the file's name: run `brewkb lint` to see why")
    odd = run(kb, "show", "Baggage Allowance")
    assert odd.returncode == 1 and odd.stderr.strip().endswith("; recipes: baggage, pay, seats")
    assert "search" not in odd.stderr
    searched = run(kb, "search", "change a seat or pay", "--json")
    assert [r["name"] for r in json.loads(searched.stdout)] == ["pay"]
    assert "skipping" in searched.stderr and "differs from the file name 'seats' (run `brewkb lint`)" in searched.stderr
    exported = run(kb, "export", "skills", str(tmp_path / "skills"), "--json")
    assert [Path(p).parent.name for p in json.loads(exported.stdout)["skills"]] == ["pay"]
    assert json.loads(exported.stdout)["skipped"] == ["baggage.md", "seats.md"]
    (kb / "recipes" / "seats.md").rename(kb / "recipes" / "seat-change.md")
    found = json.loads(run(kb, "search", "change a seat", "--json").stdout)
    assert found[0]["name"] == "seat-change" and found[0]["path"] == "recipes/seat-change.md"

SMALL = ('[env]\nname = "shop"\noptions = { train = 24, eval = 8, test = 8 }\n'
         '[search]\niterations = 1\nwidth = 2\ndepth = 1\n')


@pytest.fixture(scope="module")
def refined(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A KB made by `init`, refined at once and evaluated into its run."""
    top = tmp_path_factory.mktemp("first-hour")
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "T",
           "GIT_COMMITTER_EMAIL": "t@t"}
    assert run(top, "init", "kb", env=env).returncode == 0
    kb = top / "kb"
    (kb / "brewkb.toml").write_text(SMALL)
    refined = run(kb, "refine", "--run", "r", env=env)
    assert refined.returncode == 0, refined.stderr
    evaluated = run(kb, "eval", "--rev", "HEAD", "--rev", "brew/r/pr", "--run", "r", env=env)
    assert evaluated.returncode == 0, evaluated.stderr
    return kb, refined


def test_refine_right_after_init_reports_each_stage_once(refined: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, result = refined
    lines = result.stderr.splitlines()
    for stage in ("grades", "reflections", "concepts"):
        assert sum(line.startswith(f"{stage}: ") and "skipped" in line for line in lines) <= 1
    assert not any(line == "concepts: already done, skipped" for line in lines)
    assert lines.index(next(line for line in lines if line.startswith("search: done"))) > lines.index(
        next(line for line in lines if line.startswith("search: ") and "items" in line))


def test_pr_and_report_as_json_with_recipe_text(refined: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    kb, _ = refined
    pr = run(kb, "pr", "r", "--json")
    assert pr.returncode == 0, pr.stderr
    data = json.loads(pr.stdout)
    assert data["branch"] == "brew/r/pr" and data["head"] == git(kb, "rev-parse", "brew/r/pr").strip()
    assert data["body"] == run(kb, "pr", "r", "--body-only").stdout
    assert "| context | success |" in data["body"] and data["pushed"] is None
    assert {c["status"] for c in data["changes"]} == {"added"}
    report = run(kb, "report", "r", "--json")
    assert report.returncode == 0, report.stderr
    files = [Path(p) for p in json.loads(report.stdout)["files"]]
    assert files[0] == kb / "runs" / "r" / "report.md"
    text = files[0].read_text()
    first = data["changes"][0]["name"]
    shown = git(kb, "show", f"brew/r/pr:recipes/{first}.md").rstrip("\n")
    assert f"### `{first}` (new)\n\n```markdown\n{shown}\n```" in text
    stages = text.split("## Stages")[1].split("## LLM ledger")[0]
    assert "{" not in stages and "[" not in stages and "success rate " in stages and "%" in stages


def test_written_recipes_keep_few_sources_and_nodes_keep_all(
        refined: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    kb, _ = refined
    from brewkb.recipes import SOURCES_SHOWN, parse_recipe

    longest = 0
    for ref in git(kb, "for-each-ref", "--format=%(refname:short)", "refs/heads/brew/r/").split():
        concept, node = ref.split("/")[-2:]
        if concept in ("r", "kb", "pr") or not node.startswith("n"):
            continue
        trailer = git(kb, "log", "-1", "--format=%(trailers:key=Brew-Sources,valueonly,unfold)", ref).strip()
        every = trailer.split(", ")
        note = json.loads(git(kb, "notes", "--ref=brew", "show", ref))
        assert note["sources"] == every
        recipe = parse_recipe(git(kb, "show", f"{ref}:recipes/{concept}.md"))
        assert list(recipe.sources) == every[:SOURCES_SHOWN]
        longest = max(longest, len(every))
    assert longest > SOURCES_SHOWN


def test_help_lists_every_command_without_importing_them(tmp_path: Path) -> None:
    code = ("import sys; from brewkb.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('brewkb.') and m != 'brewkb.cli.main'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path).stdout
    assert out.strip().splitlines()[-1] == "['brewkb.cli', 'brewkb.errors']"
    assert "  report     Write RUN's report: runs/RUN/report.md, report.html and plots." in out


def test_help_summaries_match_the_commands_own_help() -> None:
    import click

    from brewkb.cli.main import cli

    for width in (60, 80, 120):
        ctx = click.Context(cli, info_name="brewkb", terminal_width=width)
        lazy, real = click.HelpFormatter(width=width), click.HelpFormatter(width=width)
        cli.format_commands(ctx, lazy)
        click.Group.format_commands(cli, ctx, real)  # imports every command
        assert lazy.getvalue() == real.getvalue()


def test_every_option_the_readme_names_is_one_the_command_takes() -> None:
    import re

    import click

    from brewkb.cli.main import cli

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `brewkb ([a-z]+(?: [a-z]+)?)([^`]*)`", readme, flags=re.M)
    assert len(rows) >= 20
    for words, usage in rows:
        command: click.Command = cli
        for word in words.split():
            if isinstance(command, click.Group):
                command = command.get_command(click.Context(command), word) or command
        known = {o for param in command.params for o in (*param.opts, *param.secondary_opts)}
        for option in re.findall(r"--[a-z][a-z-]*", usage):
            assert option in known, f"README: `brewkb {words}` has no {option}"


def test_pr_of_an_unknown_run_says_there_is_none(refined: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    kb, _ = refined
    unknown = run(kb, "pr", "nosuch")
    assert unknown.returncode == 1 and "no run 'nosuch' in this repository" in unknown.stderr
    assert " (its runs: r)" in unknown.stderr  # the runs it has, as other commands name them
    assert "--resume nosuch" not in unknown.stderr


def test_plan_refuses_an_unknown_agent_as_the_run_would(tmp_path: Path) -> None:
    assert run(tmp_path, "init", "kb").returncode == 0
    kb = tmp_path / "kb"
    (kb / "brewkb.toml").write_text(SMALL + '[agent]\nname = "tool-agnet"\n')
    plan = run(kb, "refine", "--plan")
    assert plan.returncode == 1
    assert plan.stderr.strip().startswith("brewkb: error: agent.name: unknown agent 'tool-agnet'; choose one of")


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])  # Ctrl-C; `kill`, `timeout` or a CI job's end
def test_ctrl_c_ends_a_rollout_at_once_and_leaves_no_agent_behind(make_repo: MakeRepo, tmp_path: Path,
                                                                   stop: str) -> None:
    import signal
    import time

    pids = tmp_path / "pids"
    pids.mkdir()
    agent = tmp_path / "hang.py"
    agent.write_text(f"import os, time\nopen(os.path.join({str(pids)!r}, str(os.getpid())), 'w').close()\n"
                     "time.sleep(300)\n")
    kb = make_repo({"brewkb.toml": '[env]\nname = "shop"\noptions = { train = 4, eval = 2, test = 2 }\n'
                                   f'[agent]\nname = "command"\ncommand = ["{sys.executable}", "{agent}"]\n'
                                   'timeout = 200\n', "recipes/.keep": ""})
    # as from a terminal: a suite started in the background (`pytest &`) hands its children SIGINT ignored
    proc = subprocess.Popen([sys.executable, "-m", "brewkb", "rollout", "--run", "r"], cwd=kb,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not list(pids.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(pids.iterdir()), "the agent never started"
    started = time.monotonic()
    proc.send_signal(getattr(signal, stop))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    assert time.monotonic() - started < 30  # not the agent's 200 s deadline
    # the agent wrote its id in its own PID namespace: the host knows it by its command line
    for entry in Path("/proc").iterdir():
        try:
            running = str(agent).encode() in (entry / "cmdline").read_bytes()
            state = (entry / "status").read_text().lower()
        except OSError:
            continue
        assert not running or "zombie" in state, entry

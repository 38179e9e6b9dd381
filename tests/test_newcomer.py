"""A new user's path from a fresh clone, each problem they met checked
through the real CLI: the demo's hints and its half-made folder, a broken
recipe in distill, uncommitted files, Ctrl-C to the whole process group, runs
that have no search, a published run record, and the smaller messages."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, MakeRepo, git, recipe_text
from tests.test_distill import write_logs

BIN = Path(sys.executable).parent


def brewkb(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_demo_hints_work_without_brewkb_on_the_path_and_its_folder_says_how_to_finish(tmp_path: Path) -> None:
    folder = tmp_path / "my demo"
    bare = {**os.environ, "PATH": "/usr/bin:/bin"}  # the README's set-up: a virtual environment not activated
    done = subprocess.run([str(BIN / "brewkb"), "demo", "--small", "--dir", str(folder)], capture_output=True,
                          text=True, env=bare, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"Report: {folder}/runs/demo/report.html (and report.md beside it)" in lines
    hints = lines[lines.index("Next:") + 1:]
    assert hints[0].strip() == f"cd '{folder}'" and f"{BIN / 'brewkb'} tree demo" in hints[1]
    assert not any(line.strip().startswith("brewkb ") for line in hints)
    shell = subprocess.run(["bash", "-c", f"{hints[0].strip()} && {hints[1].strip()}"], capture_output=True,
                           text=True, env=bare, cwd=tmp_path)  # as typed in a new shell
    assert shell.returncode == 0 and "★ n" in shell.stdout, shell.stderr
    again = brewkb(tmp_path, "demo", "--small", "--dir", str(folder))
    assert again.returncode == 1 and "a finished demo is there (its report: " in again.stderr
    # stopped before its PR: the message's own command finishes it
    git(folder, "update-ref", "-d", "refs/heads/brew/demo/pr")
    half = brewkb(tmp_path, "demo", "--small", "--dir", str(folder))
    assert half.returncode == 1 and "an interrupted demo is there: finish it with `" in half.stderr
    finish = half.stderr.split("finish it with `", 1)[1].split("`", 1)[0]
    assert f"-C '{folder}' refine --resume demo && " in finish
    resumed = subprocess.run(["bash", "-c", finish.replace(f"{sys.executable} -m brewkb", str(BIN / "brewkb"))],
                             capture_output=True, text=True, env=bare, cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert git(folder, "rev-parse", "--verify", "brew/demo/pr").strip()
    # a report without matplotlib says so where it is seen, and leaves no older plot behind
    assert (folder / "runs" / "demo" / "plots" / "rewards.svg").is_file()
    code = "import sys; sys.modules['matplotlib'] = None\nfrom brewkb.cli.main import main\nmain(['report', 'demo'])"
    plain = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True)
    assert plain.returncode == 0 and "Plots need matplotlib: `pip install matplotlib`" in plain.stderr
    assert not (folder / "runs" / "demo" / "plots" / "rewards.svg").exists()


def test_distill_skips_a_broken_recipe_and_names_uncommitted_files(tmp_path: Path) -> None:
    assert brewkb(tmp_path, "init", "kb").returncode == 0
    kb = tmp_path / "kb"
    (kb / "recipes" / "broken.md").write_text('---\nname: broken\ndescription: "unterminated\n---\nbody\n')
    (kb / "recipes" / "cancel-pending-order.md").write_text("---\nname: [cancel-pending-order\n---\nbody\n")  # learned
    git(kb, "add", "-A")
    git(kb, "commit", "-qm", "broken recipes")
    tau, _ = write_logs(tmp_path)
    imported = brewkb(kb, "import", str(tau), "--run", "air")  # no --format: it looks like tau-bench
    assert imported.returncode == 0 and "looks like `tau-bench`: reading it as that" in imported.stderr
    early = brewkb(kb, "tree", "air")
    assert (early.returncode, early.stderr) == (1, "brewkb: error: run air has no search yet: `brewkb distill air`\n")
    (kb / "recipes" / "hand.md").write_text(recipe_text("hand", "Written by hand"))
    with (kb / "brewkb.toml").open("a") as config:
        config.write("\n# a change not committed\n")
    done = brewkb(kb, "distill", "air", "--iterations", "1")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert "skipping recipes/broken.md at " in warnings[0] and "line" not in warnings[0]
    assert any("recipes/hand.md is not committed: the run starts from HEAD without it" in w for w in warnings)
    assert any("brewkb.toml has uncommitted changes: the run uses them" in w for w in warnings)
    assert done.stderr.index("skipping recipes/broken.md") < done.stderr.index("grades:")  # before any stage
    # a concept whose recipe in the base does not parse is chosen as a new recipe, and the PR's file parses
    assert re.search(r"recipes/cancel-pending-order.md at \w{12} does not parse \(.*\): its concept is chosen as a "
                     r"new recipe", done.stderr), done.stderr
    assert git(kb, "show", "brew/air/pr:recipes/cancel-pending-order.md").startswith(
        "---\nname: cancel-pending-order\ndescription:")
    assert re.search(r"Then `brewkb gc air` deletes its \d+ node branches", done.stdout)
    report = brewkb(kb, "report", "air")
    assert report.returncode == 0, report.stderr
    text = (kb / "runs" / "air" / "report.md").read_text()
    assert "## Compared with the baselines (held-out logs)" in text and "| new KB |" in text
    typo = brewkb(kb, "pr", "aire")
    assert typo.stderr == "brewkb: error: no run 'aire' in this repository; did you mean air? (its runs: air)\n"
    cleared = brewkb(kb, "cache", "clear", "--run", "aire", "--yes")
    assert cleared.returncode == 1 and cleared.stderr.strip().endswith("runs: air")


def test_ctrl_c_to_the_whole_process_group_exits_130(make_repo: MakeRepo, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    agent = tmp_path / "hang.py"
    agent.write_text(f"import os, time\nopen(os.path.join({str(pids)!r}, str(os.getpid())), 'w').close()\n"
                     "time.sleep(300)\n")
    kb = make_repo({"brewkb.toml": '[env]\nname = "shop"\noptions = { train = 4, eval = 2, test = 2 }\n'
                                   f'[agent]\nname = "command"\ncommand = ["{sys.executable}", "{agent}"]\n'
                                   'timeout = 200\n', "recipes/pay.md": recipe_text("pay", "Pay an invoice")})
    # a terminal's Ctrl-C reaches brewkb and every child it started (git's included) at once
    proc = subprocess.Popen([sys.executable, "-m", "brewkb", "rollout", "--run", "r"], cwd=kb,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not list(pids.iterdir()) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert list(pids.iterdir()), "the agent never started"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == ("brewkb: interrupted; what finished is kept (`brewkb runs` says how a "
                                            "run continues)")
    assert "Traceback" not in err


def test_a_signal_wins_over_the_error_it_causes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C from a terminal kills git's children too: the command may see a
    broken pipe, or a library may swallow the KeyboardInterrupt, before it ends."""
    import brewkb.api
    from brewkb.cli import main as cli_main

    def cut_short(*args: object, **kwargs: object) -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # what brewkb does on SIGINT too
            time.sleep(5)
        except KeyboardInterrupt:
            pass  # swallowed on the way, as a library may
        raise BrokenPipeError(32, "Broken pipe")  # a child that died writes nothing more

    monkeypatch.setattr(cli_main, "_signalled", [])
    monkeypatch.setattr(brewkb.api, "lint", cut_short)
    with pytest.raises(SystemExit) as info:
        cli_main.main(["lint", str(tmp_path)])
    assert info.value.code == 130
    assert "brewkb: interrupted" in capsys.readouterr().err


def test_runs_without_branches_in_progress_or_published(make_repo: MakeRepo) -> None:
    manifest = {"run": "demo", "stages": {"rollouts": {}, "search": {"nodes": 3}}}
    root = make_repo({"brewkb.toml": "", "recipes/pay.md": recipe_text("pay", "Pay an invoice"),
                      "runs/demo/manifest.json": json.dumps(manifest), "runs/demo/report.md": "# report\n",
                      "runs/busy/manifest.json": json.dumps({"run": "busy", "stages": {}})})
    for command in ("pr", "report"):
        published = brewkb(root, command, "demo")
        assert published.returncode == 1
        assert published.stderr.startswith("brewkb: error: run demo's record is in runs/demo, but its branches are "
                                           "not in this repository (a published copy, or a clone that did not "
                                           "fetch them): its report is runs/demo/report.md; fetch them with `git "
                                           "fetch REMOTE "), (command, published.stderr)
    lock = {"pid": os.getpid(), "host": os.uname().nodename, "command": "distill", "since": 0}
    (root / "runs" / "busy" / "run.lock").write_text(json.dumps(lock))  # this test's process: alive
    runs = brewkb(root, "runs")
    assert f"busy                         0/7 stages (in progress (pid {os.getpid()}: brewkb distill))" in runs.stdout
    busy = brewkb(root, "pr", "busy")
    assert busy.stderr == (f"brewkb: error: run busy is in progress (pid {os.getpid()}: brewkb distill); wait for it "
                           "to finish\n")


def test_the_smaller_messages(tmp_path: Path) -> None:
    assert brewkb(tmp_path, "init", "kb").returncode == 0
    kb = tmp_path / "kb"
    again = brewkb(tmp_path, "init", "kb")
    assert again.returncode == 0 and "is a brewkb knowledge base already; nothing changed" in again.stdout
    lint = brewkb(kb, "lint")
    assert (lint.returncode, lint.stdout, lint.stderr) == (0, "", "0 recipe files: no problems\n")
    misspelt = brewkb(kb, "distil", "logs")
    assert misspelt.returncode == 2 and "No such command 'distil'; did you mean 'distill'?" in misspelt.stderr
    assert "Where to start:" in brewkb(kb, "--help").stdout
    typo = brewkb(kb, "eval", "--run", "nightyl")  # refused before a single episode
    assert (typo.returncode, typo.stderr.strip()) == (1, f"brewkb: error: no run 'nightyl' in {kb}/runs; runs: none")
    bare = tmp_path / "bare"
    bare.mkdir()
    no_repo = brewkb(bare, "lint")
    assert no_repo.returncode == 1 and "(or `git init`)" not in no_repo.stderr
    fresh = tmp_path / "fresh"
    made = brewkb(tmp_path, "init", "fresh", "--no-commit")
    assert "Commit them (git add -A && git commit -m 'Start a brewkb KB') before a run" in made.stdout
    no_commit = brewkb(fresh, "refine", "--run", "first")
    assert "commit brewkb.toml and recipes/ first (git add -A && git commit" in no_commit.stderr


def test_the_tau2_docs_import_runs_as_written(tmp_path: Path) -> None:
    text = (REPO_ROOT / "docs" / "tau2.md").read_text()
    command = next(line for line in text.splitlines() if line.startswith("brewkb import tau2-results/"))
    assert brewkb(tmp_path, "init", "kb").returncode == 0
    kb = tmp_path / "kb"
    (kb / "tau2-results").mkdir()
    shutil.copy(REPO_ROOT / "tests" / "fixtures" / "tau2-results.json", kb / "tau2-results" / "baseline.json")
    done = subprocess.run(["bash", "-c", command], cwd=kb, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["imported"] == 2
    offered = brewkb(kb, "import", "--help").stdout
    assert "[train|eval]" in offered and "test]" not in offered

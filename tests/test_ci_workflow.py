"""The refine workflow, run step by step as GitHub would: brewkb installed from
a git URL pinned to a tag, the KB cloned from a bare remote, `gh` a fake that
records the pull request it is asked to open."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO_ROOT, git

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "brew-refine.yml"
SMALL = ('[env]\nname = "shop"\noptions = { train = 24, eval = 8, test = 8 }\n'
         '[search]\niterations = 1\nwidth = 2\ndepth = 1\n')
EMULATED = {"actions/checkout@v4", "actions/setup-python@v5", "actions/cache@v4"}


def expression(text: str, context: dict[str, str]) -> str:
    """Evaluate the `${{ a || b }}` expressions the workflow uses; an unknown
    name fails the test, so the workflow cannot use what is not emulated."""
    def one(match: re.Match[str]) -> str:
        for term in match.group(1).split("||"):
            term = term.strip()
            value = term[1:-1] if term.startswith("'") else context[term]
            if value:
                return value
        return ""

    return re.sub(r"\$\{\{\s*(.+?)\s*\}\}", one, text)


def source_repo(tmp: Path) -> str:
    """This checkout's package as a git repository with a tag, as a user would
    pin brewkb: `git+file://...@TAG`."""
    src = tmp / "brewkb-src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "brewkb", src / "brewkb", ignore=shutil.ignore_patterns("__pycache__"))
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "-A")
    git(src, "commit", "-qm", "brewkb")
    git(src, "tag", "v0.1.0")
    return f"git+file://{src}@v0.1.0"


def runner_python(tmp: Path) -> Path:
    """A fresh virtual environment standing in for setup-python. brewkb's
    dependencies are visible through a .pth file (so pip finds them installed
    and needs no download for them); brewkb itself is not."""
    venv = tmp / "runner"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    deps = tmp / "deps"
    deps.mkdir()
    own = {"pip", "setuptools", "_distutils_hack", "pkg_resources"}
    for folder in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for entry in Path(folder).iterdir():
            name = entry.name
            if name.startswith(("brewkb", "__editable__", "pip-", "setuptools-")) or name.endswith(".pth") \
                    or name in own or (deps / name).exists():
                continue
            (deps / name).symlink_to(entry)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "runner-deps.pth").write_text(f"{deps}\n")
    return venv / "bin"


def fake_gh(tmp: Path) -> tuple[Path, Path]:
    bin_dir, record = tmp / "fakebin", tmp / "gh-calls"
    bin_dir.mkdir()
    record.mkdir()
    gh = bin_dir / "gh"
    gh.write_text('#!/usr/bin/env bash\n'
                  f'printf "%s\\n" "$@" > "{record}/args"\n'
                  'while [ $# -gt 0 ]; do\n'
                  f'  if [ "$1" = "--body-file" ]; then cp "$2" "{record}/body.md"; fi\n'
                  '  shift\n'
                  'done\n'
                  'echo "https://github.example/kb/pull/1"\n')
    gh.chmod(gh.stat().st_mode | stat.S_IEXEC)
    return bin_dir, record


def test_the_refine_workflow_installs_refines_evaluates_and_opens_a_pr(tmp_path: Path) -> None:
    workflow: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert set(triggers) == {"workflow_dispatch", "schedule", "push"}
    assert not any("runs/" in p for p in triggers["push"]["paths"])  # run files are git-ignored
    job = workflow["jobs"]["refine"]
    assert {s["uses"] for s in job["steps"] if "uses" in s} <= EMULATED

    # the KB, on a bare remote, as `brewkb init` makes it
    remote, kb = tmp_path / "remote.git", tmp_path / "kb"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    made = subprocess.run([sys.executable, "-m", "brewkb", "init", str(kb)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    (kb / "brewkb.toml").write_text(SMALL)
    git(kb, "commit", "-qam", "A small shop world")
    git(kb, "remote", "add", "origin", str(remote))
    git(kb, "push", "-q", "origin", "main")
    checkout = tmp_path / "checkout"  # actions/checkout with fetch-depth 0
    git(tmp_path, "clone", "-q", str(remote), str(checkout))

    assert workflow["env"] == {"BREWKB_INSTALL": ""}  # the one place a user sets; this test sets it
    context = {"secrets.OPENAI_API_KEY": "",
               "secrets.OPENAI_BASE_URL": "", "secrets.BREWKB_PR_TOKEN": "", "github.token": "fake-token",
               "github.run_id": "7", "github.run_attempt": "1", "github.ref_name": "main"}
    python_bin = runner_python(tmp_path)
    gh_bin, record = fake_gh(tmp_path)
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    github_env, summary = runner_temp / "github-env", runner_temp / "summary.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "BREWKB_"))}
    env["BREWKB_INSTALL"] = source_repo(tmp_path)
    env |= {k: expression(str(v), context) for k, v in job["env"].items()}
    env |= {"PATH": f"{gh_bin}:{python_bin}:{env['PATH']}", "RUNNER_TEMP": str(runner_temp),
            "GITHUB_ENV": str(github_env), "GITHUB_STEP_SUMMARY": str(summary)}
    for step in job["steps"]:
        if "run" not in step:
            continue
        github_env.write_text("")
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                               expression(step["run"], context)], cwd=checkout, env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, f"step {step.get('name')}: {done.stdout}\n{done.stderr}"
        env |= dict(line.split("=", 1) for line in github_env.read_text().splitlines() if "=" in line)

    installed = subprocess.run([str(python_bin / "python"), "-c", "import brewkb; print(brewkb.__file__)"],
                               capture_output=True, text=True, env=env, cwd=tmp_path)
    assert installed.stdout.startswith(str(tmp_path / "runner"))  # not this checkout's editable copy
    args = (record / "args").read_text().splitlines()
    assert args[:6] == ["pr", "create", "--base", "main", "--head", "brew/ci-7-1/pr"]
    body = (record / "body.md").read_text()
    assert "| context | success | 95% CI |" in body and "| brew/ci-7-1/pr |" in body and "| none |" in body
    pushed = git(remote, "for-each-ref", "--format=%(refname)").split()
    assert {"refs/heads/brew/ci-7-1/pr", "refs/heads/brew/ci-7-1/kb", "refs/notes/brew"} <= set(pushed)
    assert "brew/ci-7-1/pr" in summary.read_text()


def test_the_workflow_stops_at_once_without_an_install_source(tmp_path: Path) -> None:
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["refine"]
    install = next(s for s in job["steps"] if s.get("id") == "install")
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", install["run"]], cwd=tmp_path,
                          env={**os.environ, "BREWKB_INSTALL": ""}, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stdout.startswith("::error::set BREWKB_INSTALL at the top of .github/workflows/brew-refine.yml")

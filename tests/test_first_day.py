"""A new user's first day, each path through the real CLI: the report as a
browser draws it, a dead endpoint, bad input, failed items, a folder that is
not a KB, the MCP server's protocol edges, and the smaller messages."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, MakeRepo, git, recipe_text
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.roles import embed, role_player
from tests.test_distill import write_logs

SMALL = '[env]\nname = "shop"\noptions = { train = 16, eval = 8, test = 16 }\n[search]\niterations = 2\n'
TRACEBACK = re.compile(r"Traceback|Task exception was never retrieved|this is a bug")


def brewkb(cwd: Path, *args: str, env: dict[str, str] | None = None,
           stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, input=stdin, timeout=600)


def new_kb(folder: Path, config: str = "") -> Path:
    assert brewkb(folder, "init", "kb").returncode == 0
    root = folder / "kb"
    if config:
        (root / "brewkb.toml").write_text(config)
        git(root, "commit", "-qam", "config")
    return root


@pytest.fixture(scope="module")
def refined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A small shop KB refined and reported through the CLI, as a reader would."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as env:  # made before each test's own isolated home
        for key, value in {"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "Test",
                           "GIT_AUTHOR_EMAIL": "test@example.com", "GIT_COMMITTER_NAME": "Test",
                           "GIT_COMMITTER_EMAIL": "test@example.com", "BREWKB_LOG_DIR": str(home / "logs")}.items():
            env.setenv(key, value)
        root = new_kb(tmp_path_factory.mktemp("refined"), SMALL)
        done = brewkb(root, "refine", "--run", "r")
        assert done.returncode == 0, done.stderr
        assert brewkb(root, "report", "r").returncode == 0
    yield root


# ------------------------------------------------------------ the report
def _table(markdown: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header line starts with ``header``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_report_rewards_agree_between_the_table_the_trees_and_the_iterations(refined: Path) -> None:
    report = (refined / "runs" / "r" / "report.md").read_text()
    finals = {row[0].strip("`"): float(row[4]) for row in _table(report, "| recipe | change |")}
    iterations = _table(report, "| iteration | whole KB")
    assert [row[0] for row in iterations] == ["0", "1", "2", "final"]
    # the whole KB's last point is what the PR holds: the final rewards of every recipe
    assert iterations[-1][2] == str(len(finals))
    assert float(iterations[-1][1]) == pytest.approx(sum(finals.values()) / len(finals), abs=5e-4)
    # each drawn tree gives its chosen node the final reward the table shows
    for concept, reward in finals.items():
        tree = report.split(f"### `{concept}`\n\n```mermaid")[1].split("```")[0]
        [chosen] = [line for line in tree.splitlines() if "final R" in line]
        assert f"final R {reward:.3f}" in chosen, (concept, chosen)


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        assert not os.environ.get("CI"), "chromium is needed to check the HTML report on CI (.ci/run installs it)"
        pytest.skip("needs chromium (apt-get install chromium)")
    return found


def _headless(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}"]
    return subprocess.run([chromium, *flags, *args], capture_output=True, text=True, timeout=120)


def test_report_html_as_a_browser_renders_it(refined: Path, tmp_path: Path) -> None:
    """The rendered text (the page's innerText once laid out, which keeps the
    line breaks a reader sees) and a screenshot of the page."""
    chromium = _chromium()
    page = refined / "runs" / "r" / "report.html"
    probe = tmp_path / "probe.html"  # the report plus one script that copies what is rendered into the DOM
    probe.write_text(page.read_text().replace(
        "</body>", "<script>const t = document.createElement('textarea'); t.id = 'rendered';"
                   "t.textContent = document.body.innerText; document.body.appendChild(t);</script></body>"))
    dom = _headless(chromium, tmp_path / "profile", "--dump-dom", probe.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<textarea id="rendered">(.*?)</textarea>', dom.stdout, re.S)
    assert found, dom.stdout[:2000]
    rendered = found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    lines = rendered.splitlines()
    # a recipe's text shows as the file reads: one front matter key per line
    assert "name: cancel-order" in lines and "---" in lines
    assert not any("---name:" in line or re.search(r"name: \S+description:", line) for line in lines)
    assert "brewkb run r" in lines[0]
    assert any(line.startswith("n0 · R ") for line in lines)  # the trees, as lists
    shot = tmp_path / "report.png"
    taken = _headless(chromium, tmp_path / "profile", "--window-size=1200,1600", "--hide-scrollbars",
                      f"--screenshot={shot}", page.as_uri())
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[:2] == (1600, 1200)
    ink = (pixels[..., :3].mean(axis=2) < 0.5).mean()  # dark pixels: text, table rules
    assert ink > 0.005, ink


# ------------------------------------------------------------ a dead endpoint
def _logs_kb(tmp_path: Path, base_url: str) -> Path:
    root = new_kb(tmp_path)
    tau, _ = write_logs(tmp_path)
    assert brewkb(root, "import", str(tau), "--format", "tau-bench", "--run", "logs").returncode == 0
    config = (root / "brewkb.toml").read_text().replace('backend = "offline"', 'backend = "openai"')
    config = config.replace('base_url = ""', f'base_url = "{base_url}"\nmax_retries = 0')
    (root / "brewkb.toml").write_text(config.replace("concurrency = 8", "concurrency = 1"))
    return root


def test_a_dead_endpoint_stops_the_command_at_once_with_one_message(tmp_path: Path) -> None:
    with FakeOpenAI(default={"drop": True}) as dead:
        root = _logs_kb(tmp_path, dead.base_url)
        out = brewkb(root, "distill", "logs", env={"OPENAI_API_KEY": "sk-test"})
        asked = sum(1 for path, _ in dead.requests if not path.endswith("/models"))  # the model list is answered
    assert out.returncode == 1 and not TRACEBACK.search(out.stderr)
    assert asked == 1  # not one call per item: the first that could not connect stops the command
    *progress, error = out.stderr.splitlines()
    assert progress == ["brewkb: WARNING: brewkb.toml has uncommitted changes: the run uses them as they are now "
                        "(commit them to keep them with the KB)",  # the endpoint written above
                        "grades: 14 items"]  # 18 logs; the 4 of the test split enter no stage
    assert error.startswith(f"brewkb: error: judge: cannot reach {dead.base_url}: no call of this command could "
                            "connect")
    assert "`brewkb doctor`" in error and error.endswith("run the same command again: finished items are kept and "
                                                         "only the failed ones run")


def test_an_endpoint_that_dies_midway_stops_after_a_few_failures_and_keeps_what_finished(tmp_path: Path) -> None:
    served: list[int] = []

    def dies_after_five(body: dict[str, Any]) -> dict[str, Any]:
        served.append(1)
        return role_player(body) if len(served) <= 5 else {"drop": True}

    with FakeOpenAI(default=dies_after_five) as flaky:
        root = _logs_kb(tmp_path, flaky.base_url)
        out = brewkb(root, "distill", "logs", "--iterations", "1", env={"OPENAI_API_KEY": "sk-test"})
        asked = sum(1 for path, _ in flaky.requests if not path.endswith("/models"))
    assert out.returncode == 1 and not TRACEBACK.search(out.stderr)
    assert asked == 5 + 3  # three connection failures in a row, then nothing more is tried
    assert "3 calls in a row could not connect" in out.stderr.splitlines()[-1]
    kept = (root / "runs" / "logs" / "grades.partial.jsonl").read_text().splitlines()
    assert len(kept) == 5
    with FakeOpenAI(default=role_player, embed=embed) as alive:
        config = (root / "brewkb.toml").read_text().replace(flaky.base_url, alive.base_url)
        (root / "brewkb.toml").write_text(config)
        again = brewkb(root, "distill", "logs", "--iterations", "1", env={"OPENAI_API_KEY": "sk-test"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "grades: 14 items (5 already done)" in again.stderr


# ------------------------------------------------------------ bad input changes nothing
def test_export_into_a_path_below_a_file_is_a_known_error(refined: Path, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a file\n")
    out = brewkb(refined, "export", "skills", str(tmp_path / "f" / "sub"), "--rev", "brew/r/pr")
    assert out.returncode == 1
    assert out.stderr.strip() == (f"brewkb: error: cannot create {tmp_path / 'f' / 'sub'}: Not a directory; "
                                  "pass a folder you can write to")
    assert (tmp_path / "f").read_text() == "a file\n"


def test_an_empty_import_is_refused_and_a_repeated_one_says_nothing_is_new(tmp_path: Path) -> None:
    root = new_kb(tmp_path)
    (root / "empty.jsonl").write_text("")
    for fmt in ("openai", "tau-bench", "tau2", None):
        out = brewkb(root, "import", "empty.jsonl", *(("--format", fmt) if fmt else ()))
        assert out.returncode == 1
        assert out.stderr.strip() == "brewkb: error: empty.jsonl is empty: nothing to import"
    (root / "blank.jsonl").write_text("\n\n")
    out = brewkb(root, "import", "blank.jsonl", "--format", "openai")
    assert out.stderr.strip() == "brewkb: error: blank.jsonl is empty: nothing to import"
    assert not (root / "runs" / "import-empty").exists()
    (root / "notes.md").write_text("# My logs\n\nThey are in logs/.\n")
    out = brewkb(root, "import", "notes.md", "--format", "tau2")
    assert out.stderr.strip() == ("brewkb: error: notes.md is not JSON (it starts with '# My logs'); `tau2` reads a "
                                  "JSON file: check the file")
    (root / "logs").mkdir()
    (root / "logs" / "day1.jsonl").write_text("")
    out = brewkb(root, "import", "logs", "--format", "openai")
    assert out.stderr.strip() == "brewkb: error: logs is a folder and `openai` reads a file; pass one of its files " \
                                 "(day1.jsonl)"
    assert brewkb(root, "runs").stdout.strip() == "No runs yet."
    tau, _ = write_logs(tmp_path)
    first = brewkb(root, "import", str(tau), "--format", "tau-bench", "--run", "logs")
    assert first.stdout.strip() == "Imported 18 trajectories into run logs (success rate 66.7%); skipped 0."
    again = brewkb(root, "import", str(tau), "--format", "tau-bench", "--run", "logs")
    assert again.returncode == 0
    assert again.stdout.strip() == ("Imported no new trajectories into run logs: all 18 were already there; "
                                    "skipped 0.")
    _, chat = write_logs(tmp_path)  # other logs into the same run: added, and said so
    more = brewkb(root, "import", str(chat), "--format", "openai", "--run", "logs")
    assert more.stdout.strip().splitlines() == [
        "Imported 18 trajectories into run logs (success rate 66.7%); skipped 0.",
        "The run now holds 36 trajectories, 18 of them from earlier imports; distill learns from them all."]
    assert len((root / "runs" / "logs" / "rollouts.jsonl").read_text().splitlines()) == 36


def test_a_run_of_the_wrong_kind_is_refused_with_the_command_that_fits(refined: Path, tmp_path: Path) -> None:
    tau, _ = write_logs(tmp_path)
    episodes = (refined / "runs" / "r" / "rollouts.jsonl").read_bytes()
    into_refine = brewkb(refined, "import", str(tau), "--format", "tau-bench", "--run", "r")
    assert (into_refine.returncode, into_refine.stderr.strip()) == (1, (
        "brewkb: error: run r is a refine run (its trajectories are its agent's episodes); import logs into a run "
        "of their own: --run NEW"))
    assert (refined / "runs" / "r" / "rollouts.jsonl").read_bytes() == episodes
    logs_of_refine = brewkb(refined, "eval", "--logs", "r")
    assert logs_of_refine.returncode == 1 and "run r is a refine run, not imported logs" in logs_of_refine.stderr

    root = new_kb(tmp_path)
    assert brewkb(root, "import", str(tau), "--format", "tau-bench", "--run", "logs").returncode == 0
    early = brewkb(root, "pr", "logs")
    assert early.stderr.strip() == "brewkb: error: run logs has no search yet: `brewkb distill logs`"
    assert brewkb(root, "distill", "logs").returncode == 0
    learned = (root / "runs" / "logs" / "rollouts.jsonl").read_bytes()
    late = brewkb(root, "import", str(tau), "--format", "tau-bench", "--run", "logs")
    assert late.returncode == 1 and late.stderr.startswith(
        "brewkb: error: run logs has gone on past its import (rollouts-eval, grades, relabel, reflections, concepts, "
        "integrate, search): new logs would leave those stages out of date"), late.stderr
    assert "import them into a new run (--run NEW)" in late.stderr
    assert (root / "runs" / "logs" / "rollouts.jsonl").read_bytes() == learned


def test_a_damaged_manifest_is_named_and_does_not_hide_the_other_runs(tmp_path: Path) -> None:
    root = new_kb(tmp_path)
    tau, _ = write_logs(tmp_path)
    for run in ("good", "bad"):
        assert brewkb(root, "import", str(tau), "--format", "tau-bench", "--run", run).returncode == 0
    (root / "runs" / "bad" / "manifest.json").write_text('{"broken')
    listed = brewkb(root, "runs")
    assert listed.returncode == 0
    good, bad = sorted(listed.stdout.splitlines(), reverse=True)
    assert good.startswith("good ") and "(complete" not in good
    assert bad == (f"{'bad':28} damaged: {root / 'runs' / 'bad' / 'manifest.json'} is not JSON (Unterminated string "
                   "starting at: line 1 column 2 (char 1)); restore it (`git checkout -- FILE` if you commit runs/, or from a "
                   f"backup), or delete {root / 'runs' / 'bad'} and run the run again")
    distill = brewkb(root, "distill", "bad")
    assert distill.returncode == 1 and distill.stderr.strip().endswith(
        f"or delete {root / 'runs' / 'bad'} and run the run again")


def test_json_of_concepts_and_integrate_is_one_document(refined: Path) -> None:
    concepts = brewkb(refined, "concepts", "r", "--json")
    assert concepts.returncode == 0, concepts.stderr
    assert {c["slug"] for c in json.loads(concepts.stdout)} >= {"cancel-order"}
    integrated = brewkb(refined, "integrate", "r", "--json")
    assert integrated.returncode == 0, integrated.stderr
    assert "cancel-order" in json.loads(integrated.stdout)["recipes"]
    assert "already done" in integrated.stderr  # progress stays on stderr


def test_search_and_runs_refuse_a_repository_that_is_not_a_kb(make_repo: MakeRepo) -> None:
    repo = make_repo({"README.md": "not a KB\n"})
    expected = (f"brewkb: error: {repo} is not in a brewkb KB (no brewkb.toml there or above, up to {repo}); "
                "run `brewkb init` there first")
    for args in (["search", "cancel"], ["runs"], ["refine"]):
        out = brewkb(repo, *args)
        assert (out.returncode, out.stderr.strip(), out.stdout) == (1, expected, ""), args
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md"]  # no .brewkb/ left behind
    # recipes kept by hand with the defaults are a KB
    hand = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice")})
    assert json.loads(brewkb(hand, "search", "invoice", "--json").stdout)[0]["name"] == "pay"


# ------------------------------------------------------------ failed items
def _judge_fails_on_exchanges(body: dict[str, Any]) -> dict[str, Any]:
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
    if schema == "judge" and "exchange" in json.dumps(body.get("messages")).lower():
        return {"content": "not json"}  # and again after the repair: a failed item
    return role_player(body)


def test_failed_items_stop_the_run_say_how_to_retry_and_are_named_in_the_pr(tmp_path: Path) -> None:
    shop = ('[llm]\nbackend = "openai"\nmax_retries = 0\n[env]\nname = "shop"\n'
            'options = { train = 12, eval = 6, test = 6 }\n[search]\niterations = 1\nsamples = 2\n')
    root = new_kb(tmp_path, shop)
    with FakeOpenAI(default=_judge_fails_on_exchanges, embed=embed) as fake:
        env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
        stopped = brewkb(root, "refine", "--run", "r", env=env)
        assert stopped.returncode == 1 and not TRACEBACK.search(stopped.stderr)
        error = stopped.stderr.splitlines()[-1]
        failed = int(error.split("brewkb: error: ")[1].split(" of ")[0])
        assert failed >= 1 and f" grades failed in stage grades (the first: judge: {fake.base_url} returned " \
                               "an invalid reply, also after one repair" in error
        assert "continue with `brewkb refine --resume r`" in error and "stages.accept_failed = true" in error
        listed = brewkb(root, "runs").stdout
        assert f"{failed} failed items; retry them: brewkb refine --resume r" in listed
        again = brewkb(root, "refine", "--resume", "r", env=env)  # the same items fail again: still stopped
        assert again.returncode == 1 and f"{failed} of {failed} grades failed" not in again.stderr
        assert "all " in again.stderr.splitlines()[-1]
        (root / "brewkb.toml").write_text(shop + "[stages]\naccept_failed = true\n")
        done = brewkb(root, "refine", "--resume", "r", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    body = brewkb(root, "pr", "r", "--body-only").stdout
    assert f"⚠ Left out: {failed} grades" in body and "the run went on without them (stages.accept_failed)" in body
    assert re.search(r" failed items \(\d+ left out: stages.accept_failed\)$", brewkb(root, "runs").stdout.strip())


# ------------------------------------------------------------ MCP
def _mcp(root: Path, lines: list[str]) -> list[dict[str, Any]]:
    out = brewkb(root, "mcp", stdin="".join(line + "\n" for line in lines))
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_mcp_answers_every_call_it_read_a_parse_error_and_says_its_version(make_repo: MakeRepo) -> None:
    import brewkb as package

    root = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice")})
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "search_recipes", "arguments": {"query": "invoice"}}}
    # stdin closes right after the call: the server still answers it
    replies = _mcp(root, [json.dumps(hello), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                          "this is not JSON", json.dumps(call)])
    by_id = {r.get("id"): r for r in replies}
    assert by_id[1]["result"]["serverInfo"] == {"name": "brewkb", "version": package.__version__}
    assert by_id[None]["error"]["code"] == -32700
    assert by_id[2]["result"]["structuredContent"]["result"][0]["name"] == "pay"


# ------------------------------------------------------------ smaller things
def test_the_docs_example_recipe_lints_clean(tmp_path: Path) -> None:
    text = (REPO_ROOT / "docs" / "recipes.md").read_text()
    example = text.split("```markdown\n", 1)[1].split("```", 1)[0]
    root = new_kb(tmp_path)
    (root / "recipes" / "cancel-pending-order.md").write_text(example)
    out = brewkb(root, "lint")
    assert (out.returncode, out.stdout) == (0, "")


def test_lint_says_what_it_fixed_and_names_recipes_in_sub_folders(tmp_path: Path) -> None:
    root = new_kb(tmp_path)
    (root / "recipes" / "pay.md").write_bytes(b"\xef\xbb\xbf" + recipe_text("pay", "Pay an invoice").encode())
    (root / "recipes" / "old").mkdir()
    (root / "recipes" / "old" / "refund.md").write_text(recipe_text("refund", "Refund an order"))
    fixed = brewkb(root, "lint", "--fix", "--json")
    assert fixed.stderr.strip() == "fixed recipes/pay.md: removed its UTF-8 byte-order mark"
    problems = json.loads(fixed.stdout)
    assert {"path": "recipes/old/refund.md", "line": 1, "severity": "warning",
            "message": "in a sub-folder of recipes/: brewkb reads only the files directly in recipes/",
            "hint": "move it to recipes/refund.md"} in problems
    searched = brewkb(root, "search", "refund")
    assert "ignoring " in searched.stderr and "recipes/old/refund.md: recipes in sub-folders are not read; move " \
                                              "it to recipes/refund.md" in searched.stderr


def test_doctor_says_a_finding_shared_by_roles_once(make_repo: MakeRepo) -> None:
    repo = make_repo({"README.md": "kb\n"})
    with FakeOpenAI(default=role_player, embed=embed, models=["another-model"]) as fake:
        (repo / "brewkb.toml").write_text(f'[llm]\nbackend = "openai"\nbase_url = "{fake.base_url}"\n'
                                          'model = "gpt-4o-mini"\n')
        out = brewkb(repo, "doctor")
    notes = [line for line in out.stdout.splitlines() if "'gpt-4o-mini' is not in the server's list" in line]
    assert len(notes) == 1, out.stdout
    assert notes[0].startswith("reflector, integrator, relabeller, judge") and ": warn model: model " in notes[0]


def test_tree_takes_the_concept_title_a_report_shows(refined: Path) -> None:
    by_title = brewkb(refined, "tree", "r", "--concept", "Cancel order")
    assert by_title.returncode == 0, by_title.stderr
    assert by_title.stdout == brewkb(refined, "tree", "r", "--concept", "cancel-order").stdout
    assert by_title.stdout.startswith("cancel-order  (★ n")
    wrong = brewkb(refined, "tree", "r", "--concept", "fly to the moon")
    assert wrong.returncode == 2 and "no concept 'fly to the moon' in run r" in wrong.stderr


# ------------------------------------------------------------ the plan
@pytest.mark.xdist_group("demo")
def test_plan_of_the_demo_configuration_bounds_and_expects_what_its_run_spends(
        demo_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    made, out = demo_run
    assert out.returncode == 0, out.stderr[-2000:]
    spent = json.loads(brewkb(made, "ledger", "demo", "--json").stdout)["agent"]["episodes_run"]
    planned = brewkb(made, "refine", "--plan", "--json")  # a new run with the demo's configuration
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert spent <= plan["episodes"] <= 6 * spent  # a bound before reflection has found any concept
    assert spent / 3 <= plan["expected_episodes"] <= 3 * spent
    assert sum(p["at_most"] for p in plan["parts"].values()) == plan["episodes"]
    search = plan["parts"]["search rounds"]["settings"]
    assert "search.iterations" in search and "search.samples" in search and "concepts_per_trajectory" in search
    shown = brewkb(made, "refine", "--plan").stdout
    assert re.search(rf"agent episodes +{plan['episodes']} +\({plan['expected_episodes']}\)", shown), shown
    # once the stages have found the concepts, the rest of the same run is bounded closely
    staged = brewkb(made, "refine", "--run", "staged", "--max-episodes", "260")
    assert staged.returncode == 75, staged.stderr[-2000:]
    so_far = json.loads(brewkb(made, "ledger", "staged", "--json").stdout)["agent"]["episodes_run"]
    rest = json.loads(brewkb(made, "refine", "--resume", "staged", "--plan", "--json").stdout)
    assert rest["concepts_known"] is True and rest["expected_episodes"] == rest["episodes"]
    assert spent <= so_far + rest["episodes"] <= 3 * spent


def test_the_readme_test_command_runs_in_parallel_and_names_the_slowest_tests() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    setup = readme.split("<!-- setup:begin -->")[1].split("<!-- setup:end -->")[0]
    test_command = [line for line in setup.splitlines() if line.startswith("python3 ")][1]
    pytest_args = test_command.split("-m pytest", 1)[1].split()
    assert "-n" in pytest_args and any(a.startswith("--durations=") for a in pytest_args)
    import tomllib

    extra = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(dep.startswith("pytest-xdist") for dep in extra)
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "missing+=(chromium)" in ci  # the report's browser test runs for real on CI

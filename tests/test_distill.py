from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git

PEOPLE = [("Ana", "Silva", "ana_silva_1042"), ("Bo", "Chen", "bo_chen_2231"), ("Cy", "Okafor", "cy_okafor_3310"),
          ("Di", "Moreau", "di_moreau_4477"), ("Ed", "Novak", "ed_novak_5521"), ("Fay", "Dubois", "fay_dubois_6120"),
          ("Gil", "Haddad", "gil_haddad_7001"), ("Hu", "Tanaka", "hu_tanaka_8123"), ("Ivo", "Petrov", "ivo_petrov_9034")]
PERSONAL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[a-z]{2,}|[a-z]+_[a-z]+_[0-9]{4}|#W\d{5,}")


def brewkb(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True)


def _call(n: int, name: str, args: dict, result: dict | str) -> list[dict]:
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}", "type": "function", "function": {
                "name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": f"c{n}", "name": name,
             "content": result if isinstance(result, str) else json.dumps(result)}]


CANCEL, ADDRESS = (0, 3, 7), (2, 4, 5, 6)
"""Tasks of each action, so that each is learned from two tasks and asked for by a held-out one in both formats."""


def conversation(task: int, trial: int) -> tuple[str, list[dict], bool]:
    """Nine tasks of a small support desk: cancel an order, change an address,
    and a refund that must be refused; with e-mails, user ids and order codes."""
    first, last, user = PEOPLE[task]
    email, order = f"{first.lower()}.{last.lower()}@example.com", f"#W{task}00{trial}123"
    # the member-since year tells each conversation apart once names and ids are scrubbed (a judge's cache
    # would otherwise answer identical transcripts once)
    find = _call(1, "find_user_by_email", {"email": email},
                 {"user_id": user, "name": {"first_name": first, "last_name": last}, "orders": [order],
                  "member_since": f"the year {2000 + 2 * task + trial}"})
    if task in CANCEL:
        ask = f"Hi, I am {first} {last}, my email is {email}. Please cancel order {order}."
        calls = find + _call(2, "get_order_details", {"order_id": order}, {"status": "pending"}) + \
            _call(3, "cancel_pending_order", {"order_id": order, "reason": "no longer needed"}, {"status": "cancelled"})
        ok = True
    elif task in ADDRESS:
        ask = f"I'm {first} ({email}); change the address of my order {order} to 1 Main St."
        bad = _call(2, "modify_order_address", {"order_id": order, "address1": "1 Main St"},
                    "Error: order is already delivered") if trial else []
        calls = find + bad + _call(4, "modify_pending_order_address", {"order_id": order, "address1": "1 Main St"},
                                   {"ok": True})
        ok = not trial
    else:
        ask = f"My email is {email}. I want to refund order {order}, it arrived late."
        calls = find + _call(2, "get_order_details", {"order_id": order}, {"status": "delivered"})
        if task == 8:
            calls += _call(3, "transfer_to_human_agents", {"summary": f"{user} wants a refund"}, "Transfer successful")
        ok = trial == 0
    messages = [{"role": "system", "content": "You are a support agent."}, {"role": "user", "content": ask},
                *calls, {"role": "assistant", "content": "Done." if ok else "Sorry."}]
    return f"You are {user}. {ask}", messages, ok


def write_logs(folder: Path) -> tuple[Path, Path]:
    tau, openai = [], []
    for task in range(9):
        for trial in range(2):
            instruction, messages, ok = conversation(task, trial)
            tau.append({"task_id": task, "trial": trial, "reward": float(ok),
                        "info": {"task": {"user_id": PEOPLE[task][2], "instruction": instruction}}, "traj": messages})
            openai.append({"task_id": f"t{task}", "messages": messages, "success": ok})
    (folder / "tau.json").write_text(json.dumps(tau))
    (folder / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in openai))
    return folder / "tau.json", folder / "chat.jsonl"


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    root.mkdir()
    assert brewkb(root, "init").returncode == 0  # init commits its files
    return root


def test_a_pr_of_logs_imported_in_two_formats_names_both_and_no_model_scored_it(kb: Path, tmp_path: Path) -> None:
    tau, chat = write_logs(tmp_path)
    for path, fmt in ((tau, "tau-bench"), (chat, "openai")):
        assert brewkb(kb, "import", str(path), "--format", fmt, "--run", "both").returncode == 0
    assert brewkb(kb, "distill", "both", "--iterations", "1").returncode == 0
    body = git(kb, "log", "-1", "--format=%B", "brew/both/pr")
    assert "trajectories imported from openai, tau-bench logs" in body
    assert "Offline backend" not in body and "no language model judges these figures" in body


@pytest.mark.parametrize("fmt", ["tau-bench", "openai"])
def test_distill_imported_logs_ends_with_a_clean_pr(kb: Path, tmp_path: Path, fmt: str) -> None:
    tau, chat = write_logs(tmp_path)
    assert brewkb(kb, "import", str(tau if fmt == "tau-bench" else chat), "--format", fmt, "--run", "air").returncode == 0
    assert "1/7 stages (next: grades; run: brewkb distill air)" in brewkb(kb, "runs").stdout
    done = brewkb(kb, "distill", "air", "--iterations", "2")
    assert done.returncode == 0, done.stderr
    assert "7/7 stages (complete)" in brewkb(kb, "runs").stdout
    assert "reward = retrieval on the eval split" in done.stdout
    outcomes = [line.split(" → ", 1)[1] for line in done.stdout.splitlines() if " → " in line]
    assert outcomes and all(re.fullmatch(r"(kept the (first|base) version|n\d+( \(the search's first version\))?), final "
                                         r"\d\.\d{3}|(left out|kept the base version) \(.*final reward.*\)", o)
                            for o in outcomes), outcomes
    changed = git(kb, "diff", "--name-only", "HEAD", "brew/air/pr").split()
    assert changed and all(p.startswith("recipes/") for p in changed)
    names = sorted(Path(p).stem for p in changed)
    # refunds were refused or handed off: a refusal is no recipe, and one task's hand-off is too little support
    assert names == ["cancel-pending-order", "modify-pending-order-address"]
    for path in changed:
        text = git(kb, "show", f"brew/air/pr:{path}")
        assert PERSONAL.findall(text) == [], path
        assert not any(name in text for person in PEOPLE for name in person), path
    cancel = git(kb, "show", "brew/air/pr:recipes/cancel-pending-order.md")
    assert '"Please cancel order <order_id>."' in cancel  # the request as asked, placeholders kept
    assert "modify_pending_order_address" not in cancel  # only this concept's steps
    body = git(kb, "log", "-1", "--format=%B", "brew/air/pr")
    assert "λ_corr = 0.0" in body and "What could not be measured" in body and "Task success" in body
    # a KB with no recipe yet: every tool the PR's steps call is new to it, and the reviewer is told which
    new_tools = body.split("no recipe of the base KB names", 1)[1].split("\n", 1)[0]
    assert "`cancel_pending_order`" in new_tools and "`modify_pending_order_address`" in new_tools
    shown = brewkb(kb, "pr", "air", "--body-only").stdout  # what a reviewer pipes into `gh pr create`
    assert "What could not be measured" in shown and "held-out" in shown and shown.count("Audit trail") == 1
    tree = next(line for line in shown.splitlines() if line.startswith("Search tree of"))
    assert "reward gain +0.000" not in tree and "reward gain -" not in tree, tree  # no gain is shown as none
    assert brewkb(kb, "lint").returncode == 0
    # once reviewed, the node branches go; the PR and its body stay
    gone = brewkb(kb, "gc", "air", "--json")
    assert gone.returncode == 0 and json.loads(gone.stdout)["deleted"] > 0, gone.stderr
    assert git(kb, "branch", "--list", "brew/air/*").split() == ["brew/air/archive", "brew/air/kb", "brew/air/pr"]
    assert brewkb(kb, "pr", "air", "--body-only").stdout == shown


def test_refine_on_imported_logs_is_refused_with_a_pointer_to_distill(kb: Path, tmp_path: Path) -> None:
    tau, _ = write_logs(tmp_path)
    assert brewkb(kb, "import", str(tau), "--format", "tau-bench", "--run", "air").returncode == 0
    refused = brewkb(kb, "refine", "--run", "air")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "brewkb: error: run air holds trajectories imported from tau-bench logs, not episodes of the configured "
        "environment 'shop', which refine re-runs; learn from the logs with `brewkb distill air`")
    assert git(kb, "branch", "--list", "brew/*") == ""
    assert brewkb(kb, "distill", "air", "--iterations", "1").returncode == 0
    again = brewkb(kb, "distill", "air", "--iterations", "1")  # a finished run: every stage says so
    assert again.returncode == 0 and "search: already done, skipped" in again.stderr
    assert " items" not in again.stderr, again.stderr
    pr = git(kb, "rev-parse", "brew/air/pr")
    other = brewkb(kb, "distill", "air", "--iterations", "3", "--strategy", "greedy")  # options its search cannot take
    assert (other.returncode, other.stderr.strip()) == (1, (
        "brewkb: error: run air was distilled with --strategy mcts --iterations 1, and its search keeps them; "
        "--strategy greedy --iterations 3 would change nothing: run `brewkb distill air` without them, or import "
        "the logs into a new run (`brewkb import FILE --format F --run NEW`) and distil that with them"))
    assert git(kb, "rev-parse", "brew/air/pr") == pr
    for args in (["--run", "air"], ["--resume", "air"]):  # after distill too: still refused, still pointing there
        again = brewkb(kb, "refine", *args)
        assert again.returncode == 1 and "`brewkb distill air`" in again.stderr


def test_distill_without_logs_says_what_to_do(kb: Path) -> None:
    (kb / "runs" / "empty").mkdir(parents=True)
    failed = brewkb(kb, "distill", "empty")
    assert failed.returncode == 1
    assert "bring logs in with `brewkb import FILE --format F --run empty` first" in failed.stderr


def test_distill_refuses_a_refine_run_and_leaves_its_pr_alone(kb: Path) -> None:
    config = (kb / "brewkb.toml").read_text()
    (kb / "brewkb.toml").write_text(config.replace('name = "shop"', 'name = "shop"\noptions = { train = 8, eval = 4, '
                                                   'test = 4 }', 1).replace("iterations = 10", "iterations = 1", 1))
    assert brewkb(kb, "refine", "--run", "r", "--no-eval").returncode == 0
    pr = git(kb, "rev-parse", "brew/r/pr").strip()
    refused = brewkb(kb, "distill", "r")
    assert refused.returncode == 1
    assert "run r is a refine run" in refused.stderr and "`brewkb refine --resume r`" in refused.stderr
    assert git(kb, "rev-parse", "brew/r/pr").strip() == pr


def test_a_distill_that_changes_no_recipe_says_there_is_nothing_to_review(kb: Path, tmp_path: Path) -> None:
    _, chat = write_logs(tmp_path)
    for run in ("a", "b"):  # the same logs again, once the first run's recipes are merged
        assert brewkb(kb, "import", str(chat), "--format", "openai", "--run", run).returncode == 0
        done = brewkb(kb, "distill", run, "--iterations", "2")
        assert done.returncode == 0, done.stderr
        if run == "a":
            assert "Review: git diff HEAD brew/a/pr" in done.stdout
            git(kb, "merge", "-q", "brew/a/pr")
    assert "brew/b/pr changes no recipe: every one kept the version the KB has; nothing to review." in done.stdout
    assert "Review:" not in done.stdout and not git(kb, "diff", "--name-only", "HEAD", "brew/b/pr").strip()

"""Support before change, through the real CLI: poisoned copies of real passing
conversations of the GPT-4o τ-bench airline log, forced into the learning split
among its real ones, neither add a recipe nor change a procedure
unless as many conversations of distinct tasks as the documented rules ask
for did so; a log of lookups alone gives no recipe and says why."""

from __future__ import annotations

import copy
import functools
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from brewkb.stages.concepts import held_out
from brewkb.trajectories.formats import import_file
from brewkb.trajectories.schema import Trajectory, content_id
from brewkb.trajectories.split import HOLD_OUT_EVERY, split_tasks
from brewkb.trajectories.tools import is_lookup
from tests.conftest import AIRLINE, git
from tests.test_distill import brewkb, write_logs

pytestmark = pytest.mark.skipif(not AIRLINE.is_dir(), reason="needs ../shared/data/tau-bench-airline")

INVENTED = "issue_full_refund_at_once"
NO_PROCEDURE = "No procedure is known yet"


@functools.cache
def _logged() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads((AIRLINE / "gpt-4o-trajectories.json").read_text()))


def _names(run: dict[str, Any]) -> list[str]:
    return [c["function"]["name"] for m in run["traj"] if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []]


def _passing(write: str) -> dict[str, Any]:
    """The first passing conversation of the slice that made ``write`` once and no other write."""
    return next(r for r in _logged() if r["reward"] == 1.0 and
                [n for n in _names(r) if not is_lookup(n)] == [write])


def _keep(run: dict[str, Any], keep: Callable[[str], bool]) -> dict[str, Any]:
    """``run`` without the calls (and their results) of tools ``keep`` refuses."""
    run = copy.deepcopy(run)
    gone: set[str] = set()
    traj = []
    for m in run["traj"]:
        calls = m.get("tool_calls") or []
        if calls:
            gone |= {c["id"] for c in calls if not keep(c["function"]["name"])}
            m["tool_calls"] = [c for c in calls if keep(c["function"]["name"])]
            if not m["tool_calls"] and not m.get("content"):
                continue
        if m.get("role") == "tool" and m.get("tool_call_id") in gone:
            continue
        traj.append(m)
    run["traj"] = traj
    return run


def _with_writes(run: dict[str, Any], after: str, names: list[str]) -> dict[str, Any]:
    """``run`` with a successful call of each of ``names`` after the result of its call of ``after``."""
    run = copy.deepcopy(run)
    at = next(n for n, m in enumerate(run["traj"]) if m.get("role") == "tool" and m.get("name") == after) + 1
    target = json.loads(next(c["function"]["arguments"] for m in run["traj"] for c in m.get("tool_calls") or []
                             if c["function"]["name"] == after))
    added: list[dict[str, Any]] = []
    for n, name in enumerate(names):
        call = {"id": f"call_p{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(target)}}
        added += [{"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": f"call_p{n}", "name": name, "content": "Done."}]
    run["traj"][at:at] = added
    return run


def _learning_ids(real: list[str], n: int) -> list[str]:
    """``n`` new task ids that the split puts in the learning part beside
    ``real``: it sorts tasks by a hash and holds out fixed positions of every
    ``HOLD_OUT_EVERY`` (``brewkb.trajectories.split``), so each id is taken
    where the merged order reaches a learning position."""
    def key(t: str) -> tuple[str, str]:
        return content_id(["held-out", t]), t

    ids: list[str] = []
    at = 0
    for t in sorted([*real, *(str(c) for c in range(1000, 1000 + 40 * n))], key=key):
        if t in real:
            at += 1
        elif len(ids) < n and at % HOLD_OUT_EVERY > 1:
            ids.append(t)
            at += 1
    return ids


def _log(folder: Path, *groups: tuple[dict[str, Any], int]) -> tuple[Path, set[str]]:
    """The real log plus, for each (conversation, n), n copies of the
    conversation graded as passed, each a task of its own in a place of the
    split's order that it learns from; returns the file and the tasks distill
    learns from (the eval split also takes one task of an action that more
    than two learning tasks performed, ``brewkb.trajectories.split``)."""
    real = list(_logged())
    ids = _learning_ids(sorted({str(r["task_id"]) for r in real}), sum(n for _, n in groups))
    poisoned = []
    for run, n in groups:
        for _ in range(n):
            varied = copy.deepcopy(run)  # not a copy: support counts copies of one conversation as one task
            first = next(i for i, m in enumerate(varied["traj"]) if m["role"] == "user")  # before any end marker
            varied["traj"][first] = {**varied["traj"][first], "content": f"{varied['traj'][first]['content']} "
                                     f"(#{n}-{len(poisoned)})"}
            poisoned.append({**varied, "task_id": int(ids[len(poisoned)]), "trial": 0, "reward": 1.0})
    held, test = split_tasks([str(r["task_id"]) for r in real + poisoned])
    assert not set(ids) & (held | test)  # forced into the learning places of the order
    path = folder / "logs.json"
    path.write_text(json.dumps(real + poisoned))
    held, test = held_out([t for t in import_file(path, "tau-bench") if isinstance(t, Trajectory)], 2)
    return path, {str(r["task_id"]) for r in real + poisoned} - held - test


def _distill(root: Path, logs: Path, run: str) -> str:
    assert brewkb(root, "import", str(logs), "--format", "tau-bench", "--run", run).returncode == 0
    done = brewkb(root, "distill", run, "--iterations", "2")
    assert done.returncode == 0, done.stderr
    return done.stdout


def _recipes(root: Path, run: str) -> dict[str, str]:
    names = git(root, "ls-tree", "--name-only", f"brew/{run}/pr", "recipes/").split()
    return {Path(n).stem: git(root, "show", f"brew/{run}/pr:{n}") for n in names if n.endswith(".md")}


def _steps(recipe: str) -> list[str]:
    """The numbered steps of a recipe's procedure (what an agent takes every time)."""
    how = recipe.split("## How to perform", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"(?m)^\d+\. (.+)$", how)


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    root.mkdir()
    assert brewkb(root, "init").returncode == 0
    return root


def _learned(root: Path, run: str) -> dict[str, Any]:
    return dict(json.loads((root / "runs" / run / "concepts.json").read_text()))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_poisoned_conversations_add_no_recipe_and_drop_no_check_without_support(kb: Path, tmp_path: Path,
                                                                                 n: int) -> None:
    cancel, change = _passing("cancel_reservation"), _passing("update_reservation_flights")
    skipping = _keep(cancel, lambda name: not is_lookup(name))  # the cancellation with no lookup at all
    invented = _with_writes(change, "update_reservation_flights", [INVENTED])
    logs, learning = _log(tmp_path, (skipping, n), (invented, n))
    out = _distill(kb, logs, "p")
    recipes = _recipes(kb, "p")
    assert recipes and not any(NO_PROCEDURE in text for text in recipes.values())
    learned = _learned(kb, "p")
    slug = INVENTED.replace("_", "-")
    body = brewkb(kb, "pr", "p", "--body-only").stdout
    if n < 3:  # an invented write is no recipe, and no other recipe names it: one task, or a concept that waits
        assert not any(INVENTED in text for text in recipes.values()), recipes
    if n == 1 and learning >= {str(r["task_id"]) for r in json.loads(logs.read_text()) if INVENTED in json.dumps(r)}:
        assert "'issue full refund at once' dropped: conversations of 1 task(s) did it, fewer than " \
               "stages.min_concept_tasks (2)" in learned["dropped"]
        assert "Waiting for evidence" not in body
        assert "## Not learned\n\n" in body and "- `'issue full refund at once' dropped: conversations of " \
            "1 task(s) did it" in body  # the reviewer sees what the logs did that became no recipe
    elif n == 1:  # its task is the one the eval split took to measure the real change it made too
        assert not [c for c in learned["concepts"] if c["slug"] == slug]
    elif n == 2:  # done by 2 tasks, both needed for support, so no held-out request asks for it: it waits
        [waiting] = [c for c in learned["concepts"] if c["slug"] == slug]
        assert len(waiting["q_train"]) == n and waiting["q_eval"] == []
        assert f"  {slug:32} waits for evidence" in out
        assert (f"## Waiting for evidence\n\n- `{slug}`: learned from {n} task(s), but no held-out (eval) request "
                "asked for it") in body
    else:  # one of 3 tasks is held out to measure it; without tools.known only the reviewer can tell it is made up
        [measured] = [c for c in learned["concepts"] if c["slug"] == slug]
        assert len(measured["q_train"]) == n - 1 and len(measured["q_eval"]) == 1
        assert slug in recipes
        new_tools = body.split("**New tools.**", 1)[1].split("\n", 1)[0]
        assert f"`{INVENTED}`" in new_tools and "does not list your agent's tools" in new_tools
        new_arguments = body.split("**New arguments.**", 1)[1].split("\n", 1)[0]
        assert f"`{INVENTED}(" in new_arguments  # with its signature, for the reviewer to check
    # the checks stay steps until conversations without them are more than half of the cancellations' tasks
    cancelled = {str(r["task_id"]) for r in _logged() if r["reward"] == 1.0 and "cancel_reservation" in _names(r)}
    real = len(cancelled & learning)
    steps = _steps(recipes["cancel-reservation"])
    assert ("`get_reservation_details(reservation_id)`" in steps) == (n <= real), (n, real, steps)
    assert steps[-1] == "`cancel_reservation(reservation_id)`"


@pytest.mark.parametrize("copies", [1, 3])
def test_a_conversation_of_400_invented_writes_gives_no_more_concepts_than_the_plan(kb: Path, tmp_path: Path,
                                                                                    copies: int) -> None:
    invented = [f"apply_credit_{n}" for n in range(400)]
    flood = _with_writes(_passing("cancel_reservation"), "cancel_reservation", invented)
    logs, learning = _log(tmp_path, (flood, copies))
    per_task = 0.5 if copies == 1 else 0.2  # the default, and a bound that binds
    config = kb / "brewkb.toml"
    config.write_text(config.read_text() + f"\n[stages]\nconcepts_per_task = {per_task}\n")
    git(kb, "commit", "-qam", "bound")
    assert brewkb(kb, "import", str(logs), "--format", "tau-bench", "--run", "flood").returncode == 0
    plan = brewkb(kb, "distill", "flood", "--plan").stdout
    bound = math.ceil(per_task * len(learning))
    assert re.search(rf"(?m)^  concepts +{bound}  \(at most, before reflection finds them: stages.concepts_per_task "
                     rf"{per_task} × {len(learning)} learning tasks, rounded up", plan), plan
    done = brewkb(kb, "distill", "flood", "--iterations", "2")
    assert done.returncode == 0, done.stderr
    learned = _learned(kb, "flood")
    assert len(learned["concepts"]) <= bound
    recipes = _recipes(kb, "flood")
    invented_recipes = {name for name in recipes if name.startswith("apply-credit")}
    assert set(recipes) - invented_recipes <= {"cancel-reservation", "update-reservation-flights"}
    named = {call for text in recipes.values() for call in re.findall(r"`(apply_credit_\d+)\(", text)}
    assert named == {name.replace("-", "_") for name in invented_recipes}  # a write no recipe of its own is in none
    if copies == 1:  # one conversation: no concept of its writes at all, and the search of the log without it
        assert not any(c["slug"].startswith("apply-credit") for c in learned["concepts"]) and not invented_recipes
        assert not any("apply-credit" in b for b in git(kb, "branch", "--list", "brew/flood/*").split())
    else:  # three tasks, one held out to measure them: its first writes are concepts, as many as the bound leaves
        assert len(learned["concepts"]) == bound  # room for, and without tools.known the reviewer is told of them
        assert any("the run keeps at most" in note for note in learned["dropped"])
        assert len(invented_recipes) < bound
        body = brewkb(kb, "pr", "flood", "--body-only").stdout
        new_tools = body.split("**New tools.**", 1)[1].split("\n", 1)[0]
        assert all(f"`{name.replace('-', '_')}`" in new_tools for name in invented_recipes), new_tools


def test_a_log_that_only_reads_gives_no_recipe_and_says_why(kb: Path, tmp_path: Path) -> None:
    reads = [_keep(r, is_lookup) for r in _logged()]
    (tmp_path / "reads.json").write_text(json.dumps(reads))
    assert brewkb(kb, "import", str(tmp_path / "reads.json"), "--format", "tau-bench", "--run", "reads").returncode == 0
    done = brewkb(kb, "distill", "reads")
    why = ("its learning conversations made no write and no hand-off (they only read or talked): there is no "
           "procedure to learn")
    assert (done.returncode, done.stdout.splitlines()[-1]) == (
        0, f"Nothing to learn from run reads: {why}. No PR branch was written.")
    assert git(kb, "branch", "--list", "brew/reads/*") == ""
    assert _learned(kb, "reads")["concepts"] == []
    shown = brewkb(kb, "pr", "reads", "--body-only")
    assert (shown.returncode, shown.stderr.strip()) == (
        1, f"brewkb: error: run 'reads' learned nothing, so it has no pr branch: {why}")
    again = brewkb(kb, "distill", "reads", "--require-better")
    assert again.returncode == 1 and again.stderr.strip().endswith(f"nothing shows a better KB: {why}")
    evaluated = brewkb(kb, "eval", "--logs", "reads")  # the baselines alone, and why there is no KB (not "distil it")
    assert evaluated.returncode == 0 and (f"run reads was distilled and learned nothing, so it has no KB to compare: "
                                          f"{why}") in evaluated.stdout + evaluated.stderr
    assert "brewkb distill reads" not in evaluated.stdout + evaluated.stderr
    assert "7/7 stages (complete)" in brewkb(kb, "runs").stdout


def test_the_plan_of_a_log_too_small_to_hold_tasks_out_says_it_would_learn_nothing(kb: Path, tmp_path: Path) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "cancel_order", "arguments": "{}"}}
    lines = [{"task_id": f"k{n}", "success": True, "messages": [
        {"role": "user", "content": f"Please cancel order {n}"}, {"role": "assistant", "content": None,
                                                                  "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"}]} for n in range(4)]
    (tmp_path / "four.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert brewkb(kb, "import", str(tmp_path / "four.jsonl"), "--format", "openai", "--run", "four").returncode == 0
    plan = brewkb(kb, "distill", "four", "--plan")
    assert plan.returncode == 0 and "  cost: none (nothing would be called)\n" in plan.stdout
    assert ("Its logs hold 4 tasks: distill holds tasks out only from 5 on, and a recipe is never scored on the "
            "requests it was learned from, so it would learn nothing. Import more logs into the run first.") in plan.stdout
    assert json.loads(brewkb(kb, "distill", "four", "--plan", "--json").stdout)["held_out"] == 0


def test_a_log_where_every_conversation_failed_says_so(kb: Path, tmp_path: Path) -> None:
    failed = [dict(r, reward=0.0) for r in _logged()]
    (tmp_path / "failed.json").write_text(json.dumps(failed))
    assert brewkb(kb, "import", str(tmp_path / "failed.json"), "--format", "tau-bench", "--run", "f").returncode == 0
    done = brewkb(kb, "distill", "f")
    assert done.returncode == 0 and re.search(
        r"Nothing to learn from run f: none of its \d+ learning conversations passed \(the logs' grades say every one "
        r"failed\): a recipe is learned from conversations that passed, or whose outcome is unknown\. No PR branch",
        done.stdout), done.stdout[-600:]
    assert git(kb, "branch", "--list", "brew/f/*") == ""


def test_the_gate_leaves_out_a_recipe_over_the_size_limit(kb: Path, tmp_path: Path) -> None:
    from tests.test_distill import write_logs

    config = kb / "brewkb.toml"
    config.write_text(config.read_text().replace("max_recipe_kb = 256", "max_recipe_kb = 1"))
    git(kb, "commit", "-qam", "small recipes only")
    tau, _ = write_logs(tmp_path)
    logs = json.loads(tau.read_text())
    for run in logs:  # requests long enough that a recipe quoting them is over 1 KB
        ask = next(m for m in run["traj"] if m["role"] == "user")
        ask["content"] = re.sub(r"\b(cancel|change the address)", lambda m: (
            f"since the plans we made for summer holiday number {10 + 2 * run['task_id'] + run['trial']} with the "
            f"whole family changed completely last week, {m.group(1)}"), ask["content"], count=1)
    tau.write_text(json.dumps(logs))
    out = _distill(kb, tau, "air")
    left = [line for line in out.splitlines() if " → left out (" in line]
    assert len(left) == 2 and all(re.search(r"its file would be \d\.\d KB, over kb.max_recipe_kb \(1 KB\): the index "
                                            r"would leave it out\)$", line) for line in left), out
    assert _recipes(kb, "air") == {}
    body = git(kb, "log", "-1", "--format=%B", "brew/air/pr")
    assert "## Left out by the gate\n\n- `cancel-pending-order`: its file would be 2." in body


def test_with_an_llm_backend_a_log_that_only_reads_gives_no_recipe_too(kb: Path, tmp_path: Path) -> None:
    import os

    from tests.fakes.openai_server import FakeOpenAI
    from tests.fakes.roles import embed, role_player
    from tests.test_distill import write_logs

    config = kb / "brewkb.toml"
    config.write_text(config.read_text().replace('backend = "offline"', 'backend = "openai"', 1))
    git(kb, "commit", "-qam", "use an endpoint")
    _, chat = write_logs(tmp_path)
    records = [json.loads(line) for line in chat.read_text().splitlines()]
    for record in records:  # every call that is not a lookup left out, with its result
        record["messages"] = _keep({"traj": record["messages"]}, is_lookup)["traj"]
    chat.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert brewkb(kb, "import", str(chat), "--format", "openai", "--run", "reads").returncode == 0
    with FakeOpenAI(default=role_player, embed=embed) as fake:
        env = {**os.environ, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
        done = subprocess.run([sys.executable, "-m", "brewkb", "distill", "reads"], cwd=kb, env=env,
                              capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("Nothing to learn from run reads: its learning conversations "
                                                   "made no write and no hand-off")
    learned = _learned(kb, "reads")
    # the model named concepts (after the lookups it saw called); none has a conversation that acted
    assert learned["concepts"] == [] and learned["dropped"]
    assert all("no conversation that passed did its action" in note for note in learned["dropped"]
               if "dropped" in note)


@pytest.mark.parametrize("alike", [True, False])
def test_copies_of_one_conversation_are_one_task_whatever_ids_the_log_gives_them(tmp_path: Path,
                                                                                   alike: bool) -> None:
    _, chat = write_logs(tmp_path)
    lines = chat.read_text().splitlines()
    for n in range(10):  # no task id: each line would be a task of its own
        ask = "Please delete every customer account now." if alike else f"Delete the accounts of region {n} now."
        lines.append(json.dumps({"success": True, "messages": [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "delete_all_customers", "arguments": json.dumps({"confirm": True})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"}, {"role": "assistant", "content": "Done."}]}))
    (tmp_path / "logs.jsonl").write_text("\n".join(lines) + "\n")
    root = tmp_path / "kb"
    root.mkdir()
    assert brewkb(root, "init").returncode == 0
    imported = brewkb(root, "import", str(tmp_path / "logs.jsonl"), "--format", "openai", "--run", "c")
    assert imported.returncode == 0, imported.stderr
    assert ("9 conversation(s) repeat the messages of another" in imported.stderr) == alike
    assert brewkb(root, "distill", "c", "--iterations", "1").returncode == 0
    dropped = json.loads((root / "runs" / "c" / "concepts.json").read_text())["dropped"]
    one_task = "'delete all customers' dropped: conversations of 1 task(s) did it"
    assert any(note.startswith(one_task) for note in dropped) == alike, dropped
    if alike:
        assert "delete-all-customers" not in git(root, "ls-tree", "-r", "--name-only", "brew/c/pr")


def test_conversations_that_each_make_many_writes_up_crowd_out_no_real_concept(kb: Path, tmp_path: Path) -> None:
    """Twelve tasks, each making the same forty writes up: each made-up concept has more tasks than the real
    cancellation, and more concepts than the bound; a conversation counts 1/n for each of its n actions."""
    invented = [f"grant_credit_{n}" for n in range(40)]
    flood = _with_writes(_passing("update_reservation_flights"), "update_reservation_flights", invented)
    logs, learning = _log(tmp_path, (flood, 12))
    cancelled = {str(r["task_id"]) for r in _logged() if r["reward"] == 1.0 and "cancel_reservation" in _names(r)}
    config = kb / "brewkb.toml"
    config.write_text(config.read_text() + "\n[stages]\nconcepts_per_task = 0.2\n")  # a bound the flood fills
    git(kb, "commit", "-qam", "bound")
    assert brewkb(kb, "import", str(logs), "--format", "tau-bench", "--run", "crowd").returncode == 0
    done = brewkb(kb, "distill", "crowd", "--iterations", "1")
    assert done.returncode == 0, done.stderr
    learned = _learned(kb, "crowd")
    kept = {c["slug"] for c in learned["concepts"]}
    assert any("the run keeps at most" in note for note in learned["dropped"])  # the bound binds
    assert {"cancel-reservation", "update-reservation-flights"} <= kept
    assert len(cancelled & learning) < 12  # fewer tasks than each made-up write


@pytest.mark.parametrize("done_by", [2, 3])
def test_the_eval_split_asks_for_an_action_it_can_spare_a_learning_task_of(done_by: int) -> None:
    ids = [f"t{n}" for n in range(20)]
    evaluation, test = split_tasks(ids)
    learning = [t for t in sorted(ids, key=lambda t: content_id(["held-out", t])) if t not in evaluation | test]
    actions = {t: {"book_trip"} for t in learning[:done_by]} | {t: {"cancel_trip"} for t in learning[done_by:]}
    actions |= {t: {"cancel_trip"} for t in evaluation}  # already asked for
    moved, same_test = split_tasks(ids, actions, keep=2)
    assert same_test == test
    if done_by == 2:  # both needed for support: nothing to spare, so the concept will wait
        assert moved == evaluation
    else:  # the first of the three goes to eval; two are learned from
        assert moved == evaluation | {learning[0]}


def test_an_action_made_up_in_the_tasks_of_a_real_one_does_not_keep_it_from_being_measured() -> None:
    ids = [f"t{n}" for n in range(20)]
    evaluation, test = split_tasks(ids)
    learning = [t for t in sorted(ids, key=lambda t: content_id(["held-out", t])) if t not in evaluation | test]
    actions = {t: {"book_trip", f"made_up_{n}"} for n, t in enumerate(learning[:5])}  # one task each: no support
    moved, _ = split_tasks(ids, actions, keep=2)
    assert moved == evaluation | {learning[0]}


def test_actions_made_up_by_the_dozen_move_no_more_tasks_to_eval_than_the_hash_held_out() -> None:
    ids = [f"t{n}" for n in range(40)]
    evaluation, test = split_tasks(ids)
    learning = [t for t in ids if t not in evaluation | test]
    actions = {t: {f"made_up_{n // 2}"} for n, t in enumerate(learning)}  # each done by two tasks, none held out
    moved, _ = split_tasks(ids, actions, keep=1)
    assert len(learning) // 2 > len(evaluation) and len(moved) == 2 * len(evaluation)


def test_made_up_writes_under_a_real_concepts_task_ids_do_not_lower_it_under_the_bound() -> None:
    """Conversations that each make eight writes up, under the task ids of a real concept's three tasks, make
    no concept (one task each) but would make those tasks count 1/9 each if shares were a task's: a
    conversation counts for what it did itself."""
    import numpy as np

    from brewkb.llm.roles import PRESCRIPTIVE, Insight
    from brewkb.stages.concepts import build_concepts

    def did(concept: str, source: str, task: str, write: str) -> Insight:
        return Insight(concept, "did it", PRESCRIPTIVE, source, task, steps=(f"{write}(order_id)",), kind="steps")

    made_up = [f"made_up_{n}" for n in range(8)]
    train = [did("cancel order", f"s{n}", f"r{n}", "cancel_order") for n in range(3)]
    train += [did("gift wrap", f"g{n}", f"w{n}", "gift_wrap") for n in range(2)]
    train += [did(name.replace("_", " "), f"a{n}", f"r{n}", name) for n in range(3) for name in made_up]
    actions = {**{f"s{n}": frozenset({"cancel_order"}) for n in range(3)},
               **{f"g{n}": frozenset({"gift_wrap"}) for n in range(2)},
               **{f"a{n}": frozenset(made_up) for n in range(3)}}
    names = sorted({i.concept for i in train})
    concepts, _, dropped = build_concepts(train, [], names, np.eye(len(names), dtype=np.float32), 0.9, 1,
                                          min_tasks=2, max_concepts=1, actions=actions,
                                          tasks={i.source: i.task_id for i in train})
    assert [c.slug for c in concepts] == ["cancel-order"]
    assert any(note.startswith("'gift wrap' dropped: conversations of 2 task(s) did it, and the run keeps at most 1")
               for note in dropped)

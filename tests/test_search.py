from __future__ import annotations

import asyncio
import difflib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from brewkb.agents.executors import LocalExecutor
from brewkb.api.refine import gc, load_trees, refine
from brewkb.envs.base import Task
from brewkb.git.store import GitStore
from brewkb.llm.roles import Insight
from brewkb.recipes import Recipe, build_body
from brewkb.retrieval.ranking import Retriever
from brewkb.search.engine import SAMPLE_STRIDE, SearchSpec, _chosen, _select
from brewkb.search.episodes import EpisodeCache
from brewkb.search.evaluate import Evaluator
from brewkb.search.tree import Tree, best_node, changed_chars, ranked, reward, uct_select
from brewkb.trajectories.schema import Outcome, Trajectory
from tests.conftest import MakeRepo, git

SMALL = '[env]\nname = "shop"\noptions = { train = 16, eval = 8, test = 8 }\n[search]\niterations = 3\n'


def tree_with(rewards: dict[int, tuple[int | None, float | None]]) -> Tree:
    """node id → (parent, reward), added in id order and back-propagated."""
    tree = Tree("c")
    for _, (parent, _value) in sorted(rewards.items()):
        tree.add(parent, 0)
    for node_id, (_, value) in sorted(rewards.items()):
        if value is not None:
            tree.backpropagate(node_id, value)
    return tree


def test_backpropagation_sums_subtrees() -> None:
    tree = tree_with({0: (None, 0.5), 1: (0, 0.2), 2: (0, 0.8), 3: (1, 1.0)})
    assert (tree.nodes[0].visits, tree.nodes[0].value) == (4, pytest.approx(2.5))
    assert (tree.nodes[1].visits, tree.nodes[1].value) == (2, pytest.approx(1.2))
    assert tree.nodes[3].mean == 1.0 and tree.path(3) == [0, 1, 3]
    with pytest.raises(ValueError, match="already evaluated"):
        tree.backpropagate(3, 0.1)


def test_uct_prefers_unexpanded_then_exploits_and_explores() -> None:
    tree = tree_with({0: (None, 0.5), 1: (0, 0.2), 2: (0, 0.8)})
    assert uct_select(tree, math.sqrt(2), width=3, max_depth=3).id == 0  # the root still has room
    full = tree_with({0: (None, 0.5), 1: (0, 0.2), 2: (0, 0.8), 3: (0, 0.4)})
    # UCT = mean + c·sqrt(ln N / n): all children visited once, so the best mean wins
    assert uct_select(full, math.sqrt(2), width=3, max_depth=3).id == 2
    visited = tree_with({0: (None, 0.5), 1: (0, 0.6), 2: (0, 0.7), 3: (0, 0.4), 4: (2, 0.7), 5: (2, 0.7),
                         6: (2, 0.7)})
    # n2 is full; with a large constant the rarely visited n1 wins over n2's subtree
    assert uct_select(visited, 5.0, width=3, max_depth=3).id == 1
    assert uct_select(visited, 0.0, width=3, max_depth=3).id in (4, 5, 6)
    assert uct_select(tree_with({0: (None, 0.5)}), 1.0, width=3, max_depth=0) is None


def test_best_node_by_own_reward_with_deterministic_ties() -> None:
    tree = tree_with({0: (None, 0.4), 1: (0, 0.9), 2: (0, 0.9)})
    assert best_node(tree).id == 1
    assert best_node(tree, changed={1: 50, 2: 10}).id == 2  # fewer characters changed from the parent
    # a good root is not dragged down by worse descendants (its subtree mean is 0.405)
    dragged = tree_with({0: (None, 0.72), 1: (0, 0.6), 2: (0, 0.2), 3: (0, 0.1)})
    assert dragged.root.mean < dragged.nodes[1].mean and best_node(dragged).id == 0
    deep = tree_with({0: (None, 0.5), 1: (0, 0.8), 2: (1, 0.8)})
    assert best_node(deep, changed={1: 5, 2: 5}).id == 1  # then the shallower
    assert [n.id for n in ranked(deep)] == [1, 2, 0]
    assert reward(0.5, 1.0, 0.5, 0.5) == 0.75


def _difflib_changed(parent: str, child: str) -> int:
    ops = difflib.SequenceMatcher(None, parent, child, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


def test_changed_chars_counts_what_difflib_counts() -> None:
    rng = random.Random(7)
    pairs = [("", ""), ("", "abc"), ("abc", ""), ("abxcd", "abcd"), ("aaaa", "aa"), ("ab" * 20, "ba" * 20)]
    for _ in range(3000):  # few letters: many equal-length matches, so the tie-breaks are exercised
        alphabet = rng.choice(["ab", "abc", "ab \n", "abcdefghij"])
        a = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        b = list(a)
        for _ in range(rng.randint(0, 6)):
            at = rng.randint(0, len(b))
            if rng.random() < 0.5:
                b.insert(at, rng.choice(alphabet))
            elif b:
                del b[min(at, len(b) - 1)]
        pairs.append((a, "".join(b)))
        pairs.append((a, "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))))
    recipes = sorted((Path(__file__).parent / "fixtures" / "shop-recipes").glob("*.md"))
    texts = [p.read_text() for p in recipes]
    pairs += [(x, y) for x in texts for y in texts]
    pairs += [(t, t.replace("order", "purchase", 2) + "\n## Pitfalls\n\n- Check twice.\n") for t in texts]
    assert [changed_chars(a, b) for a, b in pairs] == [_difflib_changed(a, b) for a, b in pairs]


def test_a_search_sets_its_objects_aside_from_the_collector_and_returns_them() -> None:
    import gc

    from brewkb.search.engine import _set_aside

    def collected(obj: object) -> bool:  # in a generation the collector walks (not set aside)
        return any(o is obj for o in gc.get_objects())

    assert gc.get_freeze_count() == 0
    with _set_aside() as keep:
        early, late = [0], [1]
        keep()
        assert not collected(early) and not collected(late)
        later = [2]
        assert collected(later)
    assert collected(early) and collected(later)  # all of it back once the search ends
    mine = [3]
    gc.freeze()  # a caller that froze objects of its own keeps the collector as it set it
    try:
        with _set_aside() as keep:
            new = [4]
            keep()
            assert collected(new)
        assert not collected(mine)
    finally:
        gc.unfreeze()


def test_greedy_and_iterative_selection() -> None:
    greedy = SearchSpec(strategy="greedy", width=3, depth=2)
    tree = tree_with({0: (None, 0.5), 1: (0, 0.3), 2: (0, 0.9), 3: (0, 0.6)})
    assert _select(greedy, tree).id == 2 and _chosen(greedy, tree).id == 2
    deeper = tree_with({0: (None, 0.5), 1: (0, 0.3), 2: (0, 0.9), 3: (0, 0.6), 4: (2, 0.1), 5: (2, 0.2),
                        6: (2, 0.15)})
    assert _select(greedy, deeper) is None  # depth 2 reached; never goes back to n3
    assert _chosen(greedy, deeper).id == 5  # keeps the best of the last step
    iterative = SearchSpec(strategy="iterative", width=2, depth=2)
    chain = tree_with({0: (None, 0.9), 1: (0, 0.1), 2: (1, 0.5)})
    assert _select(iterative, chain).id == 2 and _chosen(iterative, chain).id == 2  # replaces, whatever the reward
    assert iterative.rounds == 4 and iterative.per_expansion == 1 and greedy.rounds == 2


class CountingAgent:
    name = "counting"
    retrieves_per_step = False

    def __init__(self) -> None:
        self.runs = 0

    def run(self, task: Task, context: str, env: Any) -> Trajectory:
        self.runs += 1
        return Trajectory(task_id=task.id, task=task.text, messages=({"role": "user", "content": context},),
                          outcome=Outcome(False, 0.0))


class ContextEnv:
    name = "ctx"

    def grade(self, task: Task, trajectory: Trajectory) -> Outcome:
        said = str(trajectory.messages[0]["content"])
        return Outcome(task.data["needs"] in said, 1.0)


def recipe(name: str, words: str) -> Recipe:
    return Recipe(name=name, description=words, concept=name, body=build_body([("How to perform", words)]))


def test_episodes_are_reused_when_the_candidate_is_not_retrieved() -> None:
    tasks = {"t1": Task("t1", "refund a damaged parcel", "eval", {"needs": "parcel"}),
             "t2": Task("t2", "cancel a pending order", "eval", {"needs": "pending"})}
    current = {"refund": recipe("refund", "refund damaged parcel"), "cancel": recipe("cancel", "cancel pending order")}
    agent = CountingAgent()
    evaluator = Evaluator(env=ContextEnv(), agent=agent, executor=LocalExecutor(1), cache=EpisodeCache(1),
                          tasks=tasks, q_eval={"refund": ["t1", "t2"], "cancel": ["t2"]}, q_train={}, k=1,
                          budget=500, retriever=Retriever(), lambda_corr=0.5, lambda_ret=0.5)
    first = asyncio.run(evaluator.evaluate({"a": ("refund", recipe("refund", "refund damaged parcel money back"))},
                                           current))
    assert agent.runs == 2 and first["a"].r_corr == 1.0 and first["a"].r_ret == pytest.approx(0.5)
    # a second refund candidate: t2 still retrieves the cancel recipe, so its episode is reused
    second = asyncio.run(evaluator.evaluate({"b": ("refund", recipe("refund", "refund a damaged parcel to the card"))},
                                            current))
    assert agent.runs == 3
    assert [t["reused"] for t in second["b"].tasks] == [False, True]
    assert (second["b"].episodes_run, second["b"].episodes_reused) == (1, 1)
    off = Evaluator(env=ContextEnv(), agent=agent, executor=LocalExecutor(1), cache=EpisodeCache(0), tasks=tasks,
                    q_eval={"refund": ["t1", "t2"]}, q_train={}, k=1, budget=500, retriever=Retriever(),
                    lambda_corr=0.5, lambda_ret=0.5)
    asyncio.run(off.evaluate({"b": ("refund", recipe("refund", "refund a damaged parcel to the card"))}, current))
    assert agent.runs == 5  # reuse off: both tasks run again


class PerTurnAgent(CountingAgent):
    """Retrieves again at a later turn with the task's ``later`` words."""

    retrieves_per_turn = True

    def run(self, task: Task, context: str, env: Any, retriever: Any = None) -> Trajectory:
        self.runs += 1
        text, use = retriever.context(task.data["later"])
        return Trajectory(task_id=task.id, task=task.text, messages=({"role": "user", "content": context + text},),
                          outcome=Outcome(False, 0.0),
                          meta={"retrievals": [{"turn": 1, "query": task.data["later"], "recipes": list(use.recipes)}]})


def test_per_turn_episodes_are_reused_only_under_the_same_kb() -> None:
    tasks = {"t1": Task("t1", "refund a damaged parcel", "eval", {"needs": "parcel", "later": "refund parcel"}),
             "t2": Task("t2", "cancel a pending order", "eval", {"needs": "card", "later": "refund to the card"})}
    current = {"refund": recipe("refund", "refund damaged parcel"), "cancel": recipe("cancel", "cancel pending order")}
    agent = PerTurnAgent()
    cache = EpisodeCache(1)
    evaluator = Evaluator(env=ContextEnv(), agent=agent, executor=LocalExecutor(1), cache=cache, tasks=tasks,
                          q_eval={"refund": ["t1", "t2"]}, q_train={}, k=1, budget=500, retriever=Retriever(),
                          lambda_corr=0.5, lambda_ret=0.5)
    card = recipe("refund", "refund a damaged parcel to the card")
    asyncio.run(evaluator.evaluate({"a": ("refund", recipe("refund", "refund damaged parcel money back"))}, current))
    # t2's first context is the cancel recipe under both candidates, but its later turn retrieves the
    # candidate: keyed by context alone it would be reused; keyed by the KB it runs again
    second = asyncio.run(evaluator.evaluate({"b": ("refund", card)}, current))
    assert agent.runs == 4 and [t["reused"] for t in second["b"].tasks] == [False, False]
    assert second["b"].r_corr == 1.0  # t2 passes only with the card recipe its later turn retrieved
    t2 = next(t for ts in cache.episodes.values() for t in ts if t.task_id == "t2" and "card" in str(t.messages))
    assert t2.kb.recipes == ("refund",)  # the KB use is the turns' retrievals, not the first context's
    again = asyncio.run(evaluator.evaluate({"c": ("refund", card)}, current))  # the same KB: reused
    assert agent.runs == 4 and [t["reused"] for t in again["c"].tasks] == [True, True]


class RoundBackend:
    """Reflects a fixed insight the first time it sees a trajectory and records
    what the integrator receives."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.integrated: list[list[str]] = []

    async def reflect(self, trajectory: Trajectory, max_concepts: int) -> list[Insight]:
        return [Insight("refund", f"lesson of {trajectory.id}", "diagnostic", trajectory.id, trajectory.task_id)]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    async def integrate(self, concept: str, aliases: Any, insights: Any, current: Recipe | None,
                        sample: int) -> Recipe:
        self.integrated.append([i.insight for i in insights])
        assert current is not None
        return current.replace(body=build_body([("How to perform", f"sample {sample}: {len(insights)} insights")]))


def test_expansion_integrates_every_insight_so_far_and_resumes_exactly(tmp_path: Path) -> None:
    from brewkb.search.expand import ROUND_STRIDE, Expander

    assert ROUND_STRIDE == SAMPLE_STRIDE

    tasks = {"t1": Task("t1", "refund a damaged parcel", "train", {"needs": "parcel"})}
    stage = [Insight("refund", "from the stages", "prescriptive", "s0", "t0")]
    journal = tmp_path / "insights.jsonl"

    def expander(backend: RoundBackend) -> Expander:
        return Expander(env=ContextEnv(), agent=CountingAgent(), executor=LocalExecutor(1), cache=EpisodeCache(1),
                        backend=backend, tasks=tasks, q_train={"refund": ["t1"]}, mapping={"refund": "refund"},
                        titles={"refund": ("refund", ())}, k=1, budget=500, retriever=Retriever(), threshold=0.6,
                        retries=0, max_concepts=2, insights={"refund": stage}, journal=journal)

    doc = recipe("refund", "refund a damaged parcel to the card")
    backend = RoundBackend()
    first = expander(backend)
    asyncio.run(first.expand({"refund": (doc, [1000])}, {"refund": doc}))
    # round 2 runs the same episode (reused): no new insight, yet it integrates I_k, not nothing
    asyncio.run(first.expand({"refund": (doc, [2000])}, {"refund": doc}))
    lesson = backend.integrated[0][1]
    assert backend.integrated == [["from the stages", lesson], ["from the stages", lesson]]
    resumed = RoundBackend()
    asyncio.run(expander(resumed).expand({"refund": (doc, [2001])}, {"refund": doc}))
    assert resumed.integrated == [["from the stages", lesson]]
    assert len(journal.read_text().splitlines()) == 2


def test_a_new_concept_name_asked_for_by_two_concepts_at_once_maps_alike() -> None:
    from brewkb.llm.embed import hashed_ngram_embeddings
    from brewkb.search.expand import Expander

    class SlowEmbeddings(RoundBackend):
        calls = 0

        async def embed(self, texts: Sequence[str]) -> np.ndarray:
            SlowEmbeddings.calls += 1
            await asyncio.sleep(0.01)  # as an endpoint does: the other concept runs meanwhile
            return hashed_ngram_embeddings(texts)

    mapping = {"refund order": "refund-order", "cancel order": "cancel-order"}
    expander = Expander(env=ContextEnv(), agent=CountingAgent(), executor=LocalExecutor(1), cache=EpisodeCache(1),
                        backend=SlowEmbeddings(), tasks={}, q_train={}, mapping=mapping,
                        titles={}, k=1, budget=500, retriever=Retriever(), threshold=0.5, retries=0, max_concepts=2)

    async def both() -> list[dict[str, str]]:
        return list(await asyncio.gather(expander._concept_of(["refund orders", "cancel order"]),
                                         expander._concept_of(["refund orders"])))

    first, second = asyncio.run(both())
    assert first == {"refund orders": "refund-order", "cancel order": "cancel-order"}
    assert second == {"refund orders": "refund-order"}
    assert SlowEmbeddings.calls == 1


def kb_repo(make_repo: MakeRepo, name: str | None = None, extra: str = "") -> Path:
    return make_repo({"brewkb.toml": SMALL + extra, "recipes/.gitkeep": ""}, name=name)


def refs_and_trees(root: Path, run: str) -> dict[str, str]:
    out = git(root, "for-each-ref", "--format=%(refname) %(objectname) %(tree)", f"refs/heads/brew/{run}/")
    return {line.split()[0]: line for line in out.splitlines()}


def test_refine_records_nodes_notes_gathers_and_a_pr(make_repo: MakeRepo) -> None:
    root = kb_repo(make_repo)
    head = git(root, "rev-parse", "HEAD").strip()
    result = refine(run="r", start=root)
    store = GitStore(root)
    node_refs = [r for r in store.list_refs("refs/heads/brew/r/") if r.rsplit("/", 1)[1].startswith("n")]
    assert len(node_refs) == result.nodes > len(result.concepts)
    notes = store.read_notes()
    for ref in node_refs:
        note = notes[store.read_ref(ref) or ""]
        assert {"reward", "r_corr", "r_ret", "tasks", "lambda_corr", "lambda_ret"} <= set(note)
        assert note["reward"] == pytest.approx(0.5 * note["r_corr"] + 0.5 * note["r_ret"], abs=1e-5)
        parent = git(root, "rev-parse", f"{ref}~1").strip()
        assert len(git(root, "diff", "--name-only", parent, ref).split()) <= 1
    merges = git(root, "rev-list", "--first-parent", "brew/r/kb", f"^{head}").split()
    assert len(merges) == 3 + 2  # iteration 0 (the roots), one per iteration, the final gather
    final = notes[merges[0]]
    assert final["final"] is True and set(final["concepts"]) == set(result.concepts)
    for decision in final["concepts"].values():
        assert decision["reward"] >= decision["base_reward"]  # the gate
        assert decision["kept"] == (decision["node"] in (None, 0))
    assert all(len(git(root, "log", "-1", "--format=%P", m).split()) >= 2 for m in merges)
    assert git(root, "log", "-1", "--format=%P", "brew/r/pr").strip() == head
    changed = git(root, "diff", "--name-only", head, "brew/r/pr").split()
    assert changed and all(p.startswith("recipes/") and p.endswith(".md") for p in changed)
    assert git(root, "rev-parse", "brew/r/pr^{tree}") == git(root, "rev-parse", "brew/r/kb^{tree}")
    body = git(root, "log", "-1", "--format=%B", "brew/r/pr")
    assert "| recipe | base reward | final reward |" in body
    git(root, "fsck", "--strict")
    assert git(root, "status", "--porcelain").strip() == "?? runs/"
    manifest = json.loads((root / "runs" / "r" / "manifest.json").read_text())
    assert manifest["stages"]["search"]["episodes_reused"] > 0
    trees, best = load_trees("r", start=root)
    assert set(trees) == set(result.concepts) and all(best[c] == result.concepts[c]["node"] for c in trees)
    assert gc("r", start=root) == result.nodes
    assert set(store.list_refs("refs/heads/brew/r/")) == {f"refs/heads/brew/r/{k}" for k in ("kb", "pr", "archive")}
    git(root, "gc", "-q", "--prune=now")
    after, best_after = load_trees("r", start=root)  # rebuilt from the archive
    assert best_after == best and {c: {i: n.reward for i, n in t.nodes.items()} for c, t in after.items()} == \
        {c: {i: n.reward for i, n in t.nodes.items()} for c, t in trees.items()}
    assert gc("r", start=root) == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_chosen_document_is_below_its_root(make_repo: MakeRepo, seed: int) -> None:
    root = kb_repo(make_repo)
    (root / "brewkb.toml").write_text(SMALL.replace('name = "shop"', f'name = "shop"\nseed = {seed}'))
    git(root, "commit", "-qam", "seed")
    result = refine(run="s", start=root)
    trees, best = load_trees("s", start=root)
    final = GitStore(root).read_note(git(root, "rev-parse", "brew/s/kb").strip())
    for concept, tree in trees.items():
        assert tree.nodes[best[concept]].reward >= tree.root.reward  # the search's own choice
        decision = final["concepts"][concept]
        assert decision["reward"] >= decision["base_reward"]  # the PR's choice under the final evaluation
        assert {k: decision[k] for k in result.concepts[concept]["final"]} == result.concepts[concept]["final"]


def test_same_seed_same_commits(make_repo: MakeRepo) -> None:
    one = kb_repo(make_repo, "one")
    two = one.parent / "two"
    git(one.parent, "clone", "-q", str(one), str(two))
    refine(run="same", start=one)
    refine(run="same", start=two)
    assert refs_and_trees(one, "same") == refs_and_trees(two, "same")
    assert git(one, "rev-parse", "refs/notes/brew") == git(two, "rev-parse", "refs/notes/brew")


def test_greedy_and_iterative_runs(make_repo: MakeRepo) -> None:
    root = kb_repo(make_repo)
    greedy = refine(run="g", strategy="greedy", width=2, depth=2, start=root)
    trees, _ = load_trees("g", start=root)
    for tree in trees.values():
        parents = {n.parent for n in tree.nodes.values() if n.parent is not None}
        assert len(parents) <= 2 and all(len(tree.nodes[p].children) == 2 for p in parents)
    iterative = refine(run="i", strategy="iterative", width=2, depth=2, start=root)
    trees, _ = load_trees("i", start=root)
    assert all(len(t.nodes) == 1 + 4 and all(len(n.children) <= 1 for n in t.nodes.values())
               for t in trees.values())
    assert greedy.nodes > 0 and iterative.nodes > 0


def test_sigkill_mid_iteration_then_resume_gives_the_same_kb(make_repo: MakeRepo) -> None:
    reference = kb_repo(make_repo, "reference")
    refine(run="k", start=reference)
    root = reference.parent / "killed"
    git(reference.parent, "clone", "-q", str(reference), str(root))
    proc = subprocess.Popen([sys.executable, "-m", "brewkb", "refine", "--run", "k"], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    kb_ref = root / ".git" / "refs" / "heads" / "brew" / "k" / "kb"
    while time.monotonic() < deadline and proc.poll() is None:
        if kb_ref.exists() and "gather iteration 1" in git(root, "log", "-1", "--format=%s", "brew/k/kb"):
            break
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (root / ".git" / "refs" / "heads" / "brew" / "k" / "pr").exists()
    assert json.loads((root / "runs" / "k" / "run.lock").read_text())["pid"] == proc.pid  # left by the kill
    (root / ".git" / "refs" / "heads" / "brew" / "k" / "kb.lock").write_text("")  # as a kill mid-update leaves it
    out = subprocess.run([sys.executable, "-m", "brewkb", "refine", "--resume", "k"], cwd=root,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "stale lock" in out.stderr and "kb.lock" in out.stderr
    assert not (root / "runs" / "k" / "run.lock").exists()
    assert refs_and_trees(root, "k") == refs_and_trees(reference, "k")
    assert git(root, "rev-parse", "brew/k/pr") == git(reference, "rev-parse", "brew/k/pr")
    assert GitStore(root).read_notes() == GitStore(reference).read_notes()
    lines = (root / "runs" / "k" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == len(set(lines))
    git(root, "fsck", "--strict")


def test_refine_no_eval_skips_the_held_out_evaluation(make_repo: MakeRepo) -> None:
    root = kb_repo(make_repo)
    out = subprocess.run([sys.executable, "-m", "brewkb", "refine", "--run", "q", "--no-eval"], cwd=root,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "kept the base version" in out.stdout or "final reward" in out.stdout
    body = git(root, "log", "-1", "--format=%B", "brew/q/pr")
    assert "Held-out evaluation skipped (--no-eval)" in body and "| new KB" not in body
    assert not (root / "runs" / "q" / "eval.json").exists()
    assert body.rstrip().endswith("Brew-Run: q")


def test_a_kill_between_the_final_gather_and_its_note_resumes_exactly(make_repo: MakeRepo) -> None:
    root = kb_repo(make_repo)
    refine(run="f", no_eval=True, start=root)
    done = {ref: git(root, "rev-parse", ref) for ref in ("brew/f/kb", "brew/f/pr", "refs/notes/brew")}
    git(root, "update-ref", "refs/notes/brew", "refs/notes/brew~1")  # the final evaluation's note is lost
    git(root, "update-ref", "-d", "refs/heads/brew/f/pr")
    refine(resume="f", no_eval=True, start=root)
    assert {ref: git(root, "rev-parse", ref) for ref in done} == done


def test_a_run_in_use_is_refused_up_front(make_repo: MakeRepo) -> None:
    root = kb_repo(make_repo)
    (root / "runs" / "busy").mkdir(parents=True)
    with subprocess.Popen(["sleep", "60"]) as live:
        (root / "runs" / "busy" / "run.lock").write_text(json.dumps(
            {"pid": live.pid, "host": socket.gethostname(), "command": "refine"}))
        out = subprocess.run([sys.executable, "-m", "brewkb", "refine", "--run", "busy"], cwd=root,
                             capture_output=True, text=True)
        live.kill()
    assert out.returncode == 1 and f"in use by process {live.pid}" in out.stderr
    assert "Traceback" not in out.stderr and not git(root, "for-each-ref", "refs/heads/brew/").strip()


def test_two_runs_at_once_keep_their_refs(make_repo: MakeRepo) -> None:
    root = kb_repo(make_repo)
    procs = [subprocess.Popen([sys.executable, "-m", "brewkb", "refine", "--run", run], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for run in ("a", "b")]
    for proc in procs:
        assert proc.wait(300) == 0, proc.stderr.read() if proc.stderr else ""
    store = GitStore(root)
    notes = store.read_notes()
    for run in ("a", "b"):
        refs = store.list_refs(f"refs/heads/brew/{run}/")
        assert f"refs/heads/brew/{run}/kb" in refs and f"refs/heads/brew/{run}/pr" in refs
        nodes = [sha for ref, sha in refs.items() if ref.rsplit("/", 1)[1].startswith("n")]
        assert nodes and all(sha in notes for sha in nodes)
    git(root, "fsck", "--strict")


def test_resume_needs_a_started_run(make_repo: MakeRepo) -> None:
    from brewkb.errors import RunError

    root = kb_repo(make_repo)
    refine(run="r", start=root)
    with pytest.raises(RunError, match="already exists; continue it with"):
        refine(run="r", start=root)
    with pytest.raises(RunError, match="no run 'nope'"):
        refine(resume="nope", start=root)
    tree = subprocess.run([sys.executable, "-m", "brewkb", "tree", "r", "--json"], cwd=root, capture_output=True,
                          text=True, check=True)
    data = json.loads(tree.stdout)
    assert all(d["nodes"][0]["parent"] is None and d["best"] >= 0 for d in data.values())

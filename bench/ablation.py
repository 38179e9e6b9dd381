"""Ablation of the search strategy and hindsight relabelling at matched budgets.

Runs `refine` with mcts, greedy and iterative, each with and without hindsight
relabelling, over several world seeds, on the shop world (a simulation) with
the scripted agent and the offline backend (deterministic rules, no LLM), and
evaluates each run's PR on the test split. Budgets are matched: every strategy
evaluates the same number of candidate documents per concept (mcts: iterations
x samples; greedy: depth x width; iterative: width x depth). Prints test success
(mean ± standard deviation over seeds), nodes, agent episodes run and reused,
and paired per-task tests between strategies (exact McNemar test on the
(seed, task) pairs where the two disagree). The figures describe the simulation,
not an LLM agent. Also prints the test success of the base KB (no recipes)
on the same tasks. Target (``--check``): no arm's learned KB below the base
KB's mean test success (the final gate keeps a recipe only when it helps).
The seeds are the repetitions; nothing here is timed.

    python bench/ablation.py [--seeds 0,1,2] [--budget 9] [--test 100] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from math import comb
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import add_check, finish, target  # noqa: E402
from brewkb.agents import load_agent  # noqa: E402
from brewkb.agents.executors import make_executor  # noqa: E402
from brewkb.api.refine import refine  # noqa: E402
from brewkb.envs import load_environment  # noqa: E402
from brewkb.git.store import GitStore  # noqa: E402
from brewkb.kb import KB  # noqa: E402
from brewkb.llm import open_backend  # noqa: E402
from brewkb.retrieval.context import RecipeContext  # noqa: E402
from brewkb.retrieval.ranking import open_index  # noqa: E402
from brewkb.stages.rollouts import make_jobs  # noqa: E402

CONFIG = """[env]
name = "shop"
seed = {seed}
options = {{ train = 80, eval = 40, test = {test} }}
[stages]
relabel = {relabel}
[search]
strategy = "{strategy}"
iterations = {iterations}
samples = {samples}
width = {width}
depth = {depth}
"""


def shape(strategy: str, budget: int) -> dict[str, int]:
    """Search sizes that evaluate ``budget`` candidate documents per concept."""
    side = max(1, round(budget ** 0.5))
    if strategy == "mcts":
        return {"iterations": budget // side, "samples": side, "width": side, "depth": side}
    return {"iterations": 1, "samples": side, "width": side, "depth": budget // side}


async def per_task(root: Path, rev: str) -> dict[str, bool]:
    """Success of each test task with the recipes of ``rev`` as context."""
    with KB.open(root) as kb:
        config = kb.config
        _, client = open_backend(config.llm, cache_dir=kb.cache_dir, seed=config.stages.seed)
        env = load_environment(config.env, kb.root)
        agent = load_agent(config, kb.root, client)
        tasks = env.tasks("test")
        provider = RecipeContext(open_index(kb, rev), kb.store.resolve(rev), config.retrieval.k,
                                 config.retrieval.context_tokens)
        jobs = make_jobs(tasks, provider)
        results: dict[int, bool] = {}
        executor = make_executor(config.executor)
        try:
            await executor.run(agent, env, jobs, lambda i, t: results.__setitem__(i, t.success))
        finally:
            await executor.aclose()
        return {tasks[i].id: results[i] for i in range(len(tasks))}


def one(strategy: str, relabel: bool, seed: int, budget: int, test: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        (root / "recipes").mkdir()
        (root / "recipes" / ".gitkeep").write_text("")
        (root / "brewkb.toml").write_text(CONFIG.format(seed=seed, test=test, relabel=str(relabel).lower(),
                                                        strategy=strategy, **shape(strategy, budget)))
        with GitStore(root) as store:
            store.commit_all("start")
        result = refine(run="a", no_eval=True, start=root)
        outcomes = asyncio.run(per_task(root, "brew/a/pr"))
        base = asyncio.run(per_task(root, "brew/a/pr~1"))  # the base commit: no recipes
        return {"success": sum(outcomes.values()) / len(outcomes), "nodes": result.nodes,
                "run": result.episodes_run, "reused": result.episodes_reused, "outcomes": outcomes,
                "base_success": sum(base.values()) / len(base)}


def mcnemar(a: dict[tuple[int, str], bool], b: dict[tuple[int, str], bool]) -> tuple[int, int, float]:
    """Discordant pairs (a only, b only) and the exact two-sided p-value."""
    only_a = sum(1 for k in a if a[k] and not b[k])
    only_b = sum(1 for k in a if b[k] and not a[k])
    n = only_a + only_b
    if n == 0:
        return 0, 0, 1.0
    tail = sum(comb(n, i) for i in range(0, min(only_a, only_b) + 1)) / 2 ** n
    return only_a, only_b, min(1.0, 2 * tail)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--budget", type=int, default=9, help="candidate documents evaluated per concept")
    parser.add_argument("--test", type=int, default=100, help="test tasks per seed")
    add_check(parser, repeats=None)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = [(s, r) for r in (True, False) for s in ("mcts", "greedy", "iterative")]
    found: dict[tuple[str, bool], list[dict[str, object]]] = {}
    for strategy, relabel in arms:
        found[(strategy, relabel)] = [one(strategy, relabel, seed, args.budget, args.test) for seed in seeds]
    print(f"shop world (simulation), offline backend, scripted agent; seeds {seeds}; "
          f"{args.budget} candidates per concept; {args.test} test tasks per seed")
    print(f"{'strategy':10}{'relabel':>8}{'test success':>20}{'nodes':>8}{'episodes run':>14}{'reused':>8}")
    for (strategy, relabel), runs in found.items():
        rates = [float(r["success"]) for r in runs]  # type: ignore[arg-type]
        spread = statistics.stdev(rates) if len(rates) > 1 else 0.0
        nodes = statistics.mean(int(r["nodes"]) for r in runs)  # type: ignore[call-overload]
        run = statistics.mean(int(r["run"]) for r in runs)  # type: ignore[call-overload]
        reused = statistics.mean(int(r["reused"]) for r in runs)  # type: ignore[call-overload]
        print(f"{strategy:10}{'yes' if relabel else 'no':>8}{statistics.mean(rates):>13.1%} ± {spread:4.1%}"
              f"{nodes:>8.0f}{run:>14.0f}{reused:>8.0f}")
    base = statistics.mean(float(r["base_success"]) for r in found[arms[0]])  # type: ignore[arg-type]
    print(f"{'base KB':10}{'':>8}{base:>13.1%}")
    print("\npaired per-task tests (McNemar, exact; pairs = seed x test task):")

    def pairs(arm: tuple[str, bool]) -> dict[tuple[int, str], bool]:
        return {(seed, task): ok for seed, r in zip(seeds, found[arm], strict=True)
                for task, ok in r["outcomes"].items()}  # type: ignore[attr-defined]

    for left, right in [(("mcts", True), ("greedy", True)), (("mcts", True), ("iterative", True)),
                        (("greedy", True), ("iterative", True)), (("mcts", True), ("mcts", False)),
                        (("greedy", True), ("greedy", False)), (("iterative", True), ("iterative", False))]:
        only_l, only_r, p = mcnemar(pairs(left), pairs(right))
        name = f"{left[0]}{'+relabel' if left[1] else ''} vs {right[0]}{'+relabel' if right[1] else ''}"
        print(f"  {name:36} only left {only_l:4d}, only right {only_r:4d}, p = {p:.3f}")
    figures = {"seeds": seeds, "budget": args.budget, "test": args.test, "base_success": round(base, 4), "arms": {
        f"{strategy}{'+relabel' if relabel else ''}": {
            "success": round(statistics.mean(float(r["success"]) for r in runs), 4),  # type: ignore[arg-type]
            "nodes": statistics.mean(int(r["nodes"]) for r in runs)}  # type: ignore[call-overload]
        for (strategy, relabel), runs in found.items()}}
    finish("ablation", figures, {
        f"{arm} over base": target(f["success"] - base, 0.0, at_most=False, what="test success minus the base KB's")
        for arm, f in figures["arms"].items()}, args.check)  # type: ignore[union-attr]


if __name__ == "__main__":
    main()

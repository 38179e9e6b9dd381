"""The search engine's own cost per node, resume time, and episodes saved by reuse.

Runs EG-MCTS with an instant fake agent and an instant rule-based backend at the
paper's size (25 concepts x 10 iterations x 3 candidates, about 750 nodes) and
at 1,000 concepts (about 10,000 nodes after 3 iterations, 31,000 after 10),
and prints the engine's milliseconds per node, CPU and wall: time minus the
time spent inside the agent, the grader and the backend (which stand for
episodes and LLM calls). The KB size (concepts) and the node count (which
grows with iterations) are set apart, so ``--concepts 1000 --iterations 3,10``
shows how the cost per node moves with the number of nodes at one KB size.
Also prints the time to rebuild the trees from git (what `refine --resume`
does first), and, on the shop world with the scripted agent and the offline
backend, how many agent episodes rollout reuse saved.

The engine has no outside equivalent to measure beside it; its reference is
itself at fewer nodes, in the same run. Each size runs ``--repeats`` times
(medians and spread). Targets, on CPU time (on a shared machine far steadier
than wall time, which a quiet machine makes equal): at most 2 ms per node at
the most nodes, and flat or falling as nodes grow (at the most nodes at most
1.1x the cost at the fewest, for the same KB size).

    python bench/search.py [--concepts 25,1000] [--iterations 3,10] [--repeats 3] [--no-shop] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import add_check, checked_repeats, finish, spread, target  # noqa: E402
from brewkb.agents.executors import LocalExecutor  # noqa: E402
from brewkb.envs.base import Task  # noqa: E402
from brewkb.git.store import GitStore  # noqa: E402
from brewkb.llm.embed import hashed_ngram_embeddings  # noqa: E402
from brewkb.llm.roles import Insight  # noqa: E402
from brewkb.recipes import Recipe, build_body  # noqa: E402
from brewkb.retrieval.ranking import Retriever  # noqa: E402
from brewkb.search.engine import SearchSpec, rebuild, search  # noqa: E402
from brewkb.search.episodes import EpisodeCache  # noqa: E402
from brewkb.search.evaluate import Evaluator  # noqa: E402
from brewkb.search.expand import Expander  # noqa: E402
from brewkb.search.store import SearchStore  # noqa: E402
from brewkb.trajectories.schema import Outcome, Trajectory  # noqa: E402

TARGET_MS = 2.0
FLAT = 1.1
WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega orbit comet nova pulse".split()
OUTSIDE = 0.0  # wall seconds spent in the agent, the grader and the backend
OUTSIDE_CPU = 0.0  # their CPU seconds (this process)


class Clock:
    def __enter__(self) -> None:
        self.t, self.c = time.perf_counter(), time.process_time()

    def __exit__(self, *exc: object) -> None:
        global OUTSIDE, OUTSIDE_CPU
        OUTSIDE += time.perf_counter() - self.t
        OUTSIDE_CPU += time.process_time() - self.c


def words(i: int) -> str:
    return f"{WORDS[i % len(WORDS)]} {WORDS[(i // len(WORDS)) % len(WORDS)]} topic{i}"


class InstantAgent:
    name = "instant"
    retrieves_per_step = False

    def run(self, task: Task, context: str, env: Any) -> Trajectory:
        with Clock():
            return Trajectory(task_id=task.id, task=task.text, messages=(
                {"role": "user", "content": task.text}, {"role": "assistant", "content": str(len(context) % 7)}),
                outcome=Outcome(False, 0.0))


class InstantEnv:
    name = "instant"

    def grade(self, task: Task, trajectory: Trajectory) -> Outcome:
        with Clock():
            ok = int(str(trajectory.messages[-1]["content"])) % 2 == 0
            return Outcome(ok, float(ok))


class InstantBackend:
    name = "instant"

    async def reflect(self, trajectory: Trajectory, max_concepts: int = 2) -> list[Insight]:
        with Clock():
            concept = trajectory.task_id.split(":")[0]
            return [Insight(concept, f"step {len(trajectory.messages)}", "prescriptive", trajectory.id,
                            trajectory.task_id, trajectory.task, ("do_it(x)",), "steps")]

    async def integrate(self, concept: str, aliases: Sequence[str], insights: Sequence[Insight],
                        current: Recipe | None, sample: int) -> Recipe:
        with Clock():
            base = current or Recipe(name=concept, description="")
            extra = " ".join(WORDS[(sample + i) % len(WORDS)] for i in range(3))
            return base.replace(description=f"{base.description.split(' |')[0]} | {extra}",
                                body=build_body([("How to perform", f"1. `do_it(x)` {extra}")]))

    async def relabel(self, trajectory: Trajectory) -> None:
        return None

    async def judge(self, trajectory: Trajectory, rubrics: Sequence[Any]) -> Any:
        raise NotImplementedError

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        with Clock():
            return hashed_ngram_embeddings(texts)


def setup(root: Path, concepts: int) -> tuple[SearchStore, Expander, Evaluator, dict[str, Recipe]]:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "recipes").mkdir()
    (root / "recipes" / "README.md").write_text("recipes\n")
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=root, check=True, env={**env, "PATH": "/usr/bin:/bin"})
    git = GitStore(root)
    slugs = [f"concept-{i}" for i in range(concepts)]
    tasks, q_train, q_eval = {}, {}, {}
    for i, slug in enumerate(slugs):
        q_train[slug] = [f"{slug}:t{j}" for j in range(2)]
        q_eval[slug] = [f"{slug}:e{j}" for j in range(2)]
        for task_id in q_train[slug] + q_eval[slug]:
            tasks[task_id] = Task(task_id, f"please {words(i)} {task_id[-2:]}", "train")
    roots = {s: Recipe(name=s, description=f"how to {words(i)}", concept=words(i),
                       body=build_body([("How to perform", "1. `do_it(x)`")])) for i, s in enumerate(slugs)}
    cache = EpisodeCache(1)
    common = {"env": InstantEnv(), "agent": InstantAgent(), "executor": LocalExecutor(1), "cache": cache,
              "tasks": tasks, "k": 3, "budget": 1500, "retriever": Retriever()}
    backend = InstantBackend()
    expander = Expander(**common, backend=backend, q_train=q_train, mapping={s: s for s in slugs},
                        titles={s: (roots[s].concept, ()) for s in slugs}, threshold=0.6, retries=0, max_concepts=1)
    evaluator = Evaluator(**common, q_eval=q_eval, q_train=q_train, lambda_corr=0.5, lambda_ret=0.5)
    store = SearchStore(git, "bench", git.head_commit(), "recipes")
    return store, expander, evaluator, roots


def bench(concepts: int, iterations: int) -> dict[str, float]:
    global OUTSIDE, OUTSIDE_CPU
    with tempfile.TemporaryDirectory() as tmp:
        store, expander, evaluator, roots = setup(Path(tmp) / "kb", concepts)
        OUTSIDE = OUTSIDE_CPU = 0.0
        start, start_cpu = time.perf_counter(), time.process_time()
        result = asyncio.run(search(SearchSpec(iterations=iterations), store, expander, evaluator, roots))
        total, total_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        nodes = sum(len(t.nodes) for t in result.trees.values())
        start = time.perf_counter()
        state = rebuild(store, sorted(roots))
        resume = time.perf_counter() - start
        assert sum(len(t.nodes) for t in state.trees.values()) == nodes
    engine = (total - OUTSIDE) / nodes * 1000
    engine_cpu = (total_cpu - OUTSIDE_CPU) / nodes * 1000
    print(f"KB of {concepts:>5} recipes x {iterations:>2} iterations: {nodes:>6} nodes in {total:.1f} s "
          f"(CPU {total_cpu:.1f} s); agent+grader+backend {OUTSIDE:.1f} s; engine {engine:.2f} ms/node wall, "
          f"{engine_cpu:.2f} ms/node CPU; rebuild from git {resume:.2f} s", flush=True)
    return {"nodes": nodes, "engine_cpu_ms": engine_cpu, "engine_wall_ms": engine, "rebuild_s": resume}


def shop_reuse() -> dict[str, int]:
    from brewkb.api.refine import refine

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "kb"
        env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
               "GIT_COMMITTER_EMAIL": "b@b"}
        subprocess.run([sys.executable, "-m", "brewkb", "init", str(root)], check=True, capture_output=True,
                       env=env)  # init commits its files
        result = refine(run="reuse", start=root)
    asked = result.episodes_run + result.episodes_reused
    print(f"shop world, default refine: {result.nodes} nodes; search episodes asked for {asked}, "
          f"reused {result.episodes_reused} ({result.episodes_reused / max(asked, 1):.0%}), run {result.episodes_run}")
    return {"nodes": result.nodes, "episodes_asked": asked, "episodes_reused": result.episodes_reused}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concepts", default="25,1000")
    parser.add_argument("--iterations", default="3,10",
                        help="comma-separated; nodes grow with iterations at a fixed KB size")
    parser.add_argument("--no-shop", action="store_true", help="skip the shop-world reuse figure")
    add_check(parser)
    args = parser.parse_args()
    repeats = checked_repeats(args)
    sizes = [(int(c), int(i)) for c in args.concepts.split(",") for i in args.iterations.split(",")]
    runs: dict[tuple[int, int], list[dict[str, float]]] = {size: [] for size in sizes}
    for _ in range(repeats):
        for size in sizes:
            runs[size].append(bench(*size))
    figures: dict[str, object] = {}
    for (concepts, iterations), values in runs.items():
        figures[f"{concepts}x{iterations}"] = {
            "concepts": concepts, "iterations": iterations, "nodes": values[0]["nodes"],
            **{key: spread([v[key] for v in values], 3) for key in ("engine_cpu_ms", "engine_wall_ms", "rebuild_s")}}
        print(f"median of {repeats}: {concepts} recipes x {iterations} iterations ({values[0]['nodes']} nodes): "
              f"engine {figures[f'{concepts}x{iterations}']['engine_cpu_ms']['median']:.2f} ms/node CPU "
              f"(spread {min(v['engine_cpu_ms'] for v in values):.2f}–{max(v['engine_cpu_ms'] for v in values):.2f})")
    if not args.no_shop:
        figures["shop_reuse"] = shop_reuse()
    largest = max(runs, key=lambda size: runs[size][0]["nodes"])
    same_kb = [size for size in runs if size[0] == largest[0]]
    fewest = min(same_kb, key=lambda size: runs[size][0]["nodes"])
    at_most = statistics.median(v["engine_cpu_ms"] for v in runs[largest])
    at_fewest = statistics.median(v["engine_cpu_ms"] for v in runs[fewest])
    finish("search", figures, {
        "engine_ms_per_node": target(at_most, TARGET_MS, what=f"ms of CPU per node at {runs[largest][0]['nodes']} nodes"),
        "growth": target(at_most / at_fewest, FLAT, what=f"x the cost per node at {runs[fewest][0]['nodes']} nodes "
                                                        f"({fewest[0]} recipes)"),
    }, args.check)


if __name__ == "__main__":
    main()

"""Speed of the shop world: 200 episodes of the scripted agent, graded.

Prints the time of 200 episodes without a KB and with the hand-written recipe
set of the tests (retrieval included), and the success rate of each, as
medians of ``--repeats`` repetitions with their spread. The world has no
outside equivalent to measure beside it. Target: under 10 s for 200 episodes
on 2 cores, with either context.

    python bench/shop.py [--episodes 200] [--repeats 3] [--check]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import add_check, checked_repeats, finish, spread, target  # noqa: E402
from brewkb.agents.base import run_episode  # noqa: E402
from brewkb.envs.shop import ShopEnvironment  # noqa: E402
from brewkb.envs.shop.agent import ScriptedAgent  # noqa: E402
from brewkb.recipes import read_recipe  # noqa: E402
from brewkb.retrieval.context import NoContext, RecipeContext  # noqa: E402
from brewkb.retrieval.index import RecipeIndex  # noqa: E402

TARGET_S = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    add_check(parser)
    args = parser.parse_args()
    repeats = checked_repeats(args)
    env = ShopEnvironment(counts={"test": args.episodes})
    tasks = env.tasks("test")
    recipes = [read_recipe(p) for p in sorted((ROOT / "tests" / "fixtures" / "shop-recipes").glob("*.md"))]
    contexts = {"no KB": NoContext(), "hand-written KB": RecipeContext(RecipeIndex.build(recipes), None)}
    agent = ScriptedAgent()
    print(f"{args.episodes} test episodes of shop-scripted, {repeats} repetitions")
    seconds: dict[str, list[float]] = {label: [] for label in contexts}
    success: dict[str, float] = {}
    for _ in range(repeats):
        for label, provider in contexts.items():
            start = time.perf_counter()
            wins = 0
            for task in tasks:
                text, kb = provider.context(task.text)
                wins += run_episode(agent, task, text, env, kb).success
            seconds[label].append(time.perf_counter() - start)
            success[label] = wins / len(tasks)
    figures: dict[str, object] = {"episodes": args.episodes}
    for label in contexts:
        figures[label] = {"seconds": spread(seconds[label], 3), "success": success[label]}
        s = figures[label]["seconds"]  # type: ignore[index]
        print(f"  {label:16} median {s['median']:6.2f} s ({s['median'] / len(tasks) * 1000:.1f} ms/episode; "
              f"{s['min']:.2f}–{s['max']:.2f} s)  success {success[label]:.1%}")
    finish("shop", figures, {f"{label} seconds": target(statistics.median(seconds[label]), TARGET_S,
                                                        what=f"s for {args.episodes} episodes")
                             for label in contexts}, args.check)

if __name__ == "__main__":
    main()

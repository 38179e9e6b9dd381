"""Speed of the shop world: 200 episodes of the scripted agent, graded.

Prints the time of 200 episodes without a KB and with the hand-written recipe
set of the tests (retrieval included), and the success rate of each. The
target is under 10 s for 200 episodes on 2 cores.

    python bench/shop.py [--episodes 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from brewkb.agents.base import run_episode  # noqa: E402
from brewkb.envs.shop import ShopEnvironment  # noqa: E402
from brewkb.envs.shop.agent import ScriptedAgent  # noqa: E402
from brewkb.recipes import read_recipe  # noqa: E402
from brewkb.retrieval.context import NoContext, RecipeContext  # noqa: E402
from brewkb.retrieval.index import RecipeIndex  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    args = parser.parse_args()
    env = ShopEnvironment(counts={"test": args.episodes})
    tasks = env.tasks("test")
    recipes = [read_recipe(p) for p in sorted((ROOT / "tests" / "fixtures" / "shop-recipes").glob("*.md"))]
    contexts = {"no KB": NoContext(), "hand-written KB": RecipeContext(RecipeIndex.build(recipes), None)}
    agent = ScriptedAgent()
    print(f"{args.episodes} test episodes of shop-scripted")
    for label, provider in contexts.items():
        start = time.perf_counter()
        wins = 0
        for task in tasks:
            text, kb = provider.context(task.text)
            wins += run_episode(agent, task, text, env, kb).success
        elapsed = time.perf_counter() - start
        print(f"  {label:16} {elapsed:6.2f} s ({elapsed / len(tasks) * 1000:.1f} ms/episode)  "
              f"success {wins / len(tasks):.1%}")


if __name__ == "__main__":
    main()

"""How often the search proposes a document whose own reward is below its root's.

Refines the shop world (a simulation) with the offline backend and the
scripted agent over several world seeds and prints, per seed, the concepts
whose chosen document (the one in the ``pr`` commit) has a lower own reward
than the root written before any search, and the largest such gap. These are
figures of a simulation, not of an LLM. Target (``--check``): none (the
final choice never takes a candidate the search measured below its root).
The seeds are the repetitions; nothing here is timed.

    python bench/chosen.py [--seeds 0,1,2] [--iterations 10] [--check]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import add_check, finish, target  # noqa: E402
from brewkb.api.refine import load_trees, refine  # noqa: E402
from brewkb.git.store import GitStore  # noqa: E402

CONFIG = """[env]
name = "shop"
seed = {seed}
options = {{ train = 160, eval = 80, test = 40 }}
[search]
iterations = {iterations}
"""


def one(seed: int, iterations: int) -> tuple[int, int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        (root / "recipes").mkdir()
        (root / "recipes" / ".gitkeep").write_text("")
        (root / "brewkb.toml").write_text(CONFIG.format(seed=seed, iterations=iterations))
        with GitStore(root) as store:
            store.commit_all("start")
        refine(run="b", start=root)
        trees, _ = load_trees("b", start=root)
        with GitStore(root) as store:
            pr_files = store.read_folder(store.resolve("brew/b/pr"), "recipes")
            worse, gap = 0, 0.0
            for concept, tree in sorted(trees.items()):
                text = pr_files.get(f"recipes/{concept}.md")
                # the node whose document the pr commit holds (the root when the search kept it)
                blobs = {n.id: store.lookup(store.commit_tree(store.resolve(f"brew/b/{concept}/n{n.id}")),
                                            f"recipes/{concept}.md") for n in tree.nodes.values()}
                match = [n for n in tree.nodes.values() if n.reward is not None and text is not None
                         and store.read_blob(blobs[n.id].sha) == text]
                chosen = min(match, key=lambda n: n.id) if match else tree.root
                root_reward = tree.root.reward or 0.0
                if (chosen.reward or 0.0) < root_reward - 1e-9:
                    worse += 1
                    gap = max(gap, root_reward - (chosen.reward or 0.0))
                    print(f"  seed {seed}: {concept} root {root_reward:.3f} -> chosen n{chosen.id} "
                          f"{chosen.reward:.3f}")
        return worse, len(trees), gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--iterations", type=int, default=10)
    add_check(parser, repeats=None)
    args = parser.parse_args()
    total = 0
    per_seed = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        worse, concepts, gap = one(seed, args.iterations)
        total += worse
        per_seed[str(seed)] = {"below_root": worse, "concepts": concepts, "largest_gap": round(gap, 4)}
        print(f"seed {seed}: {worse} of {concepts} concepts chosen below their root (largest gap {gap:.3f})")
    print(f"total: {total}")
    finish("chosen", {"iterations": args.iterations, "seeds": per_seed, "total": total},
           {"below_root": target(total, 0, what="concepts chosen below their root, all seeds")}, args.check)

if __name__ == "__main__":
    main()

"""Cost of writing search nodes: brewkb's git store against GitPython porcelain.

A node is: one recipe blob, the trees that replace it in the base tree, a
commit, a branch, and a JSON note. brewkb writes notes in batches (one notes
commit per 100 nodes, as a search iteration would); the porcelain reference
adds one note per node with `git notes`, as a script built on GitPython would.

    python bench/gitstore.py [--nodes 1000] [--porcelain-nodes 100]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import git

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from brewkb.git.refs import BrewRef  # noqa: E402
from brewkb.git.store import GitStore, format_message  # noqa: E402

RECIPES = 25


def make_repo(root: Path) -> git.Repo:
    repo = git.Repo.init(root)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "bench")
        cw.set_value("user", "email", "bench@example.com")
    (root / "recipes").mkdir()
    for i in range(RECIPES):
        (root / "recipes" / f"concept-{i}.md").write_text(f"---\nname: concept-{i}\n---\nbody {i}\n")
    repo.index.add([f"recipes/concept-{i}.md" for i in range(RECIPES)])
    repo.index.commit("base")
    return repo


def doc(i: int) -> bytes:
    return f"---\nname: concept-{i % RECIPES}\n---\nversion {i}\n".encode() + b"step\n" * 40


def brewkb_nodes(root: Path, n: int, batch: int = 100) -> float:
    store = GitStore(root)
    base = store.head_commit()
    base_tree = store.commit_tree(base)
    pending: dict[str, dict[str, object]] = {}
    start = time.perf_counter()
    for i in range(n):
        concept = f"concept-{i % RECIPES}"
        tree = store.replace_file(base_tree, f"recipes/{concept}.md", doc(i))
        message = format_message(f"brew: {concept} n{i}", trailers={"Brew-Run": "bench", "Brew-Node": str(i)})
        commit = store.write_commit(tree, [base], message, timestamp=1_700_000_000 + i)
        store.update_ref(str(BrewRef.for_node("bench", concept, i)), commit, expected=None)
        pending[commit] = {"reward": i / n, "r_corr": 0.5, "r_ret": 0.5}
        if len(pending) == batch:
            store.add_notes(pending, "brew: rewards\n", timestamp=1_700_000_000 + i)
            pending = {}
    store.add_notes(pending, "brew: rewards\n", timestamp=1_700_000_000 + n)
    elapsed = time.perf_counter() - start
    assert len(store.read_notes()) == n
    store.close()
    return elapsed


def porcelain_nodes(root: Path, n: int) -> float:
    repo = git.Repo(root)
    base = repo.head.commit
    start = time.perf_counter()
    for i in range(n):
        concept = f"concept-{i % RECIPES}"
        repo.head.reset(base, index=True, working_tree=True)
        (root / "recipes" / f"{concept}.md").write_bytes(doc(i))
        repo.index.add([f"recipes/{concept}.md"])
        commit = repo.index.commit(f"brew: {concept} n{i}", parent_commits=[base], head=False)
        repo.create_head(f"brew/bench/{concept}/n{i}", commit)
        repo.git.notes("--ref=brew", "add", "-m", f'{{"reward": {i / n}}}', commit.hexsha)
    elapsed = time.perf_counter() - start
    repo.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--porcelain-nodes", type=int, default=100,
                        help="porcelain is slow; its per-node cost is measured on fewer nodes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours_root, ref_root = Path(tmp, "ours"), Path(tmp, "porcelain")
        make_repo(ours_root).close()
        make_repo(ref_root).close()
        ours = brewkb_nodes(ours_root, args.nodes) / args.nodes * 1000
        theirs = porcelain_nodes(ref_root, args.porcelain_nodes) / args.porcelain_nodes * 1000
        fsck = subprocess.run(["git", "fsck", "--strict"], cwd=ours_root, capture_output=True, text=True)
    print(f"nodes written by brewkb:       {args.nodes}")
    print(f"brewkb git store:              {ours:.2f} ms/node (blob+trees+commit+ref+note, notes batched per 100)")
    print(f"GitPython porcelain:           {theirs:.2f} ms/node (over {args.porcelain_nodes} nodes)")
    print(f"speed-up:                      {theirs / ours:.1f}x")
    print(f"git fsck after brewkb:         {'clean' if fsck.returncode == 0 else fsck.stderr.strip()}")


if __name__ == "__main__":
    main()

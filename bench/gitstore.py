"""Cost of writing search nodes: brewkb's git store against ``git fast-import`` of the same nodes.

A node is: one recipe blob, the trees that replace it in the base tree, a
commit, a branch, and a JSON note. brewkb writes them as a search iteration
does (``SearchStore.write_node`` inside ``SearchStore.writing()``, then one
notes commit for the iteration's rewards), ``--batch`` nodes per iteration.
The reference is ``git fast-import`` given the same nodes as one stream (the
same blobs and messages, commits on the same base, the same branches, the
same notes, one notes commit per iteration): git's own bulk writer, which
puts every object in one pack and writes a loose ref per branch, as brewkb
does. Both are timed from the first object to the last ref (fast-import's
stream is made before its clock starts), in fresh repositories each
repetition, interleaved. Also prints GitPython porcelain (index, commit, branch,
``git notes add`` per node) on fewer nodes, the way a script built on
GitPython would do it.

Target: brewkb at most 2x fast-import's milliseconds per node.

    python bench/gitstore.py [--nodes 1000] [--batch 250] [--porcelain-nodes 50] [--repeats 3] [--check]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import git

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchkit import add_check, checked_repeats, finish, spread, target  # noqa: E402

from brewkb.git.store import GitStore, format_message  # noqa: E402
from brewkb.search.store import SearchStore  # noqa: E402

RECIPES = 25
TARGET = 2.0
T0 = 1_700_000_000


def make_repo(root: Path) -> str:
    repo = git.Repo.init(root)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "bench")
        cw.set_value("user", "email", "bench@example.com")
    (root / "recipes").mkdir()
    for i in range(RECIPES):
        (root / "recipes" / f"concept-{i}.md").write_text(f"---\nname: concept-{i}\n---\nbody {i}\n")
    repo.index.add([f"recipes/concept-{i}.md" for i in range(RECIPES)])
    base = repo.index.commit("base").hexsha
    repo.close()
    return base


def doc(i: int) -> str:
    return f"---\nname: concept-{i % RECIPES}\n---\nversion {i}\n" + "step\n" * 40


def message(i: int, iteration: int) -> str:
    """The message brewkb's search writes for the node."""
    concept = f"concept-{i % RECIPES}"
    return format_message(f"brew(bench): {concept} n{i}", f"A candidate version of recipes/{concept}.md.", {
        "Brew-Run": "bench", "Brew-Concept": concept, "Brew-Node": f"n{i}", "Brew-Parent": "base",
        "Brew-Iteration": str(iteration), "Brew-Sample": "0", "Brew-Sources": "none"})


def note(i: int, n: int) -> dict[str, object]:
    return {"reward": i / n, "r_corr": 0.5, "r_ret": 0.5}


def brewkb_nodes(root: Path, n: int, batch: int) -> float:
    """Seconds to write ``n`` nodes as the search does, ``batch`` nodes per iteration."""
    git_store = GitStore(root)
    store = SearchStore(git_store, "bench", git_store.head_commit(), "recipes")
    start = time.perf_counter()
    for iteration, first in enumerate(range(0, n, batch)):
        with store.writing():
            commits = {i: store.write_node(f"concept-{i % RECIPES}", i, None, store.base, iteration, 0, doc(i), ())[0]
                       for i in range(first, min(first + batch, n))}
        store.write_notes({commits[i]: note(i, n) for i in commits}, iteration)
    elapsed = time.perf_counter() - start
    assert len(git_store.read_notes()) == n
    git_store.close()
    return elapsed


def fast_import_stream(base: str, n: int, batch: int) -> bytes:
    """The same nodes as a ``git fast-import`` stream."""
    out = []

    def data(raw: bytes) -> None:
        out.append(b"data %d\n" % len(raw) + raw + b"\n")

    for iteration, first in enumerate(range(0, n, batch)):
        nodes = range(first, min(first + batch, n))
        for i in nodes:
            concept = f"concept-{i % RECIPES}"
            out.append(b"blob\nmark :%d\n" % (2 * i + 1))
            data(doc(i).encode())
            out.append(f"commit refs/heads/brew/bench/{concept}/n{i}\nmark :{2 * i + 2}\n"
                       f"committer bench <bench@example.com> {T0 + iteration} +0000\n".encode())
            data(message(i, iteration).encode())
            out.append(f"from {base}\nM 100644 :{2 * i + 1} recipes/{concept}.md\n\n".encode())
        # one notes commit per iteration, each continuing the branch's last one
        out.append(f"commit refs/notes/brew\ncommitter bench <bench@example.com> {T0 + iteration} +0000\n".encode())
        data(f"brew(bench): rewards of iteration {iteration}\n".encode())
        for i in nodes:
            out.append(b"N inline :%d\n" % (2 * i + 2))
            data(json.dumps(note(i, n), indent=2, sort_keys=True).encode() + b"\n")
        out.append(b"\n")
    return b"".join(out)


def fast_import_nodes(root: Path, base: str, n: int, batch: int) -> float:
    stream = fast_import_stream(base, n, batch)
    start = time.perf_counter()
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input=stream, check=True)
    elapsed = time.perf_counter() - start
    notes = subprocess.run(["git", "notes", "--ref=brew", "list"], cwd=root, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert len(notes) == n, len(notes)
    return elapsed


def porcelain_nodes(root: Path, n: int) -> float:
    repo = git.Repo(root)
    base = repo.head.commit
    start = time.perf_counter()
    for i in range(n):
        concept = f"concept-{i % RECIPES}"
        repo.head.reset(base, index=True, working_tree=True)
        (root / "recipes" / f"{concept}.md").write_text(doc(i))
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
    parser.add_argument("--batch", type=int, default=250, help="nodes written per batch, as one search iteration")
    parser.add_argument("--porcelain-nodes", type=int, default=50,
                        help="porcelain is slow; its per-node cost is measured on fewer nodes, once (0: skip)")
    add_check(parser)
    args = parser.parse_args()
    repeats = checked_repeats(args)
    ours: list[float] = []
    reference: list[float] = []
    fsck_clean = True
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for side in (("brewkb", "fast-import") if r % 2 == 0 else ("fast-import", "brewkb")):
                root = Path(tmp, f"{side}-{r}")
                base = make_repo(root)
                if side == "brewkb":
                    ours.append(brewkb_nodes(root, args.nodes, args.batch) / args.nodes * 1000)
                    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=root, capture_output=True, text=True)
                    fsck_clean = fsck_clean and fsck.returncode == 0
                else:
                    reference.append(fast_import_nodes(root, base, args.nodes, args.batch) / args.nodes * 1000)
            print(f"repetition {r + 1}: brewkb {ours[-1]:.2f} ms/node, git fast-import {reference[-1]:.2f} ms/node",
                  flush=True)
        porcelain = None
        if args.porcelain_nodes:
            root = Path(tmp, "porcelain")
            make_repo(root)
            porcelain = porcelain_nodes(root, args.porcelain_nodes) / args.porcelain_nodes * 1000
    ratios = [a / b for a, b in zip(ours, reference, strict=True)]
    figures = {"nodes": args.nodes, "batch": args.batch, "brewkb_ms_per_node": spread(ours, 3),
               "fast_import_ms_per_node": spread(reference, 3), "ratio": spread(ratios, 3),
               "porcelain_ms_per_node": round(porcelain, 2) if porcelain is not None else None,
               "fsck_clean": fsck_clean}
    print(f"nodes: {args.nodes}, {args.batch} per iteration (one notes commit each)")
    print(f"brewkb git store:   median {figures['brewkb_ms_per_node']['median']:.2f} ms/node "
          f"(min {min(ours):.2f}, max {max(ours):.2f})")
    print(f"git fast-import:    median {figures['fast_import_ms_per_node']['median']:.2f} ms/node "
          f"(min {min(reference):.2f}, max {max(reference):.2f})")
    if porcelain is not None:
        print(f"GitPython porcelain: {porcelain:.2f} ms/node (over {args.porcelain_nodes} nodes, once)")
    print(f"git fsck --strict after brewkb: {'clean' if fsck_clean else 'NOT clean'}")
    finish("gitstore", figures, {
        "ratio_to_fast_import": target(figures["ratio"]["median"], TARGET, what="x git fast-import's ms/node"),
        "fsck_clean": target(float(fsck_clean), 1.0, at_most=False, what="(1: git fsck --strict is clean)"),
    }, args.check)


if __name__ == "__main__":
    main()

"""Search trees as text (terminal) and as JSON."""

from __future__ import annotations

from typing import Any

from brewkb.search.tree import Tree

__all__ = ["tree_lines", "tree_json", "mermaid"]


def _label(tree: Tree, node_id: int, on_path: set[int]) -> str:
    n = tree.nodes[node_id]
    reward = "   –  " if n.reward is None else f"{n.reward:.3f}"
    star = " ★" if node_id in on_path else ""
    return f"n{n.id}  R={reward}  mean={n.mean:.3f}  visits={n.visits}  it={n.iteration}{star}"


def tree_lines(tree: Tree, best: int) -> list[str]:
    on_path = set(tree.path(best)) if tree.nodes else set()
    lines = [f"{tree.concept}  (★ n{best}: the version chosen, measured again by the final evaluation)"]

    def walk(node_id: int, prefix: str, last: bool) -> None:
        lines.append(f"{prefix}{'└─ ' if last else '├─ '}{_label(tree, node_id, on_path)}")
        children = tree.nodes[node_id].children
        for i, child in enumerate(children):
            walk(child, prefix + ("   " if last else "│  "), i == len(children) - 1)

    if tree.nodes:
        walk(0, "", True)
    return lines


def tree_json(tree: Tree, best: int) -> dict[str, Any]:
    return {"best": best, "nodes": [
        {"id": n.id, "parent": n.parent, "depth": n.depth, "iteration": n.iteration, "reward": n.reward,
         "visits": n.visits, "mean": n.mean, "children": list(n.children)} for n in tree.nodes.values()]}


def mermaid(tree: Tree, best: int, final: str = "") -> list[str]:
    """A Mermaid flowchart of the tree (GitHub draws these inside markdown);
    the path to the chosen node is highlighted, and ``final`` (its final
    evaluation, when there was one) added to that node's label."""
    lines = ["graph TD"]
    for n in tree.nodes.values():
        reward = "–" if n.reward is None else f"{n.reward:.2f}"
        extra = f" · {final}" if final and n.id == best else ""
        visits = f"{n.visits} visit{'' if n.visits == 1 else 's'}"
        lines.append(f'  n{n.id}["n{n.id} · R {reward} · mean {n.mean:.2f} · {visits}{extra}"]')
    for n in tree.nodes.values():
        if n.parent is not None:
            lines.append(f"  n{n.parent} --> n{n.id}")
    lines.append("  classDef best fill:#ffe08a,stroke:#b8860b,stroke-width:2px")
    if tree.nodes:
        lines.append("  class " + ",".join(f"n{i}" for i in tree.path(best)) + " best")
    return lines

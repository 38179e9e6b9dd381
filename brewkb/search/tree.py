"""Search trees as plain values: nodes, UCT selection, back-propagation and the
best node. No git, no I/O.

A node is a version of one concept's document. Its ``reward`` is its own
evaluation (``None`` until evaluated); ``visits`` and ``value`` count the
evaluated nodes of its subtree and the sum of their rewards, which is what
back-propagation maintains and what a rebuild from git derives.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Node", "Tree", "uct_select", "best_node", "ranked", "reward"]


@dataclass
class Node:
    id: int
    parent: int | None
    depth: int
    iteration: int
    reward: float | None = None
    visits: int = 0
    value: float = 0.0
    children: list[int] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return self.value / self.visits if self.visits else 0.0


@dataclass
class Tree:
    concept: str
    nodes: dict[int, Node] = field(default_factory=dict)

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def add(self, parent: int | None, iteration: int) -> Node:
        """A new child of ``parent`` (the root when ``parent`` is ``None``), with the next id."""
        node_id = max(self.nodes, default=-1) + 1
        depth = 0 if parent is None else self.nodes[parent].depth + 1
        node = Node(node_id, parent, depth, iteration)
        self.nodes[node_id] = node
        if parent is not None:
            self.nodes[parent].children.append(node_id)
        return node

    def backpropagate(self, node_id: int, value: float) -> None:
        """Record ``node_id``'s reward and add it to every ancestor's statistics."""
        node = self.nodes[node_id]
        if node.reward is not None:
            raise ValueError(f"node {node_id} of {self.concept} is already evaluated")
        node.reward = value
        current: Node | None = node
        while current is not None:
            current.visits += 1
            current.value += value
            current = self.nodes[current.parent] if current.parent is not None else None

    def path(self, node_id: int) -> list[int]:
        out = [node_id]
        while (parent := self.nodes[out[-1]].parent) is not None:
            out.append(parent)
        return out[::-1]

    def evaluated(self) -> Iterable[Node]:
        return (n for n in self.nodes.values() if n.reward is not None)


def uct_select(tree: Tree, exploration: float, width: int, max_depth: int) -> Node | None:
    """Descend from the root by UCT to the first node with fewer than
    ``width`` children and depth below ``max_depth``; ``None`` when the tree
    has no such node left. Unvisited children are tried first, lowest id first."""
    node = tree.root
    while True:
        if len(node.children) < width and node.depth < max_depth:
            return node
        candidates = [tree.nodes[c] for c in node.children if _expandable(tree, tree.nodes[c], width, max_depth)]
        if not candidates:
            return None
        log_n = math.log(max(node.visits, 1))

        def score(child: Node) -> tuple[float, int]:
            if child.visits == 0:
                return (math.inf, -child.id)
            return (child.mean + exploration * math.sqrt(log_n / child.visits), -child.id)

        node = max(candidates, key=score)


def _expandable(tree: Tree, node: Node, width: int, max_depth: int) -> bool:
    if len(node.children) < width and node.depth < max_depth:
        return True
    return any(_expandable(tree, tree.nodes[c], width, max_depth) for c in node.children)


def changed_chars(parent: str, child: str) -> int:
    """Characters inserted or deleted from ``parent`` to ``child``: the sum,
    over the gaps between the blocks ``difflib.SequenceMatcher(None, parent,
    child, autojunk=False)`` matches, of the longer side of the gap.

    The same blocks as difflib's, found faster: difflib visits every pair of
    equal characters (quadratic on prose, where a few letters are most of the
    text), this asks ``str.find`` (C) whether a window of ``parent`` occurs in
    ``child`` (see ``_longest_match``)."""
    if parent == child:
        return 0
    queue = [(0, len(parent), 0, len(child))]
    blocks = []
    while queue:  # difflib's get_matching_blocks: the longest match, then each side of it
        alo, ahi, blo, bhi = queue.pop()
        i, j, k = _longest_match(parent, child, alo, ahi, blo, bhi)
        if k:
            blocks.append((i, j, k))
            if alo < i and blo < j:
                queue.append((alo, i, blo, j))
            if i + k < ahi and j + k < bhi:
                queue.append((i + k, ahi, j + k, bhi))
    changed = i = j = 0
    for bi, bj, k in sorted(blocks) + [(len(parent), len(child), 0)]:
        changed += max(bi - i, bj - j)
        i, j = bi + k, bj + k
    return changed


def _longest_match(a: str, b: str, alo: int, ahi: int, blo: int, bhi: int) -> tuple[int, int, int]:
    """``SequenceMatcher.find_longest_match(alo, ahi, blo, bhi)`` without junk:
    the longest common substring of ``a[alo:ahi]`` and ``b[blo:bhi]``, the
    one starting first in ``a`` among equals, at its first place in ``b``;
    ``(alo, blo, 0)`` when they share no character.

    The scan keeps the longest match so far (``best``) and asks of each start
    in ``a`` only whether its window one longer than ``best`` occurs in ``b``
    (one search per start); a start that passes is measured by doubling its
    window, then bisecting (a window that occurs has every prefix occurring)."""
    best, besti = 0, alo
    find = b.find
    i = alo
    while i + best < ahi:
        if find(a[i:i + best + 1], blo, bhi) < 0:
            i += 1
            continue
        low, high, step = best + 1, ahi - i, 1  # a window of length low occurs; none longer than high fits
        while low < high:
            probe = min(low + step, high)
            if find(a[i:i + probe], blo, bhi) < 0:
                high = probe - 1
                break
            low, step = probe, step * 2
        while low < high:
            middle = (low + high + 1) // 2
            if find(a[i:i + middle], blo, bhi) < 0:
                high = middle - 1
            else:
                low = middle
        best, besti = low, i
        i += 1
    if not best:
        return alo, blo, 0
    return besti, find(a[besti:besti + best], blo, bhi), best


def best_node(tree: Tree, changed: Mapping[int, int] | None = None) -> Node:
    """The evaluated node with the best *own* reward (a subtree mean says how
    promising a region is, not how good a document is). Ties go to the node
    with fewer characters changed from its parent (``changed``: node id →
    characters; unknown counts as 0), then the shallower, then the older."""
    return ranked(tree, changed)[0]


def ranked(tree: Tree, changed: Mapping[int, int] | None = None) -> list[Node]:
    """The evaluated nodes (the root when none is), best first, in
    ``best_node``'s order."""
    evaluated = list(tree.evaluated()) or [tree.root]
    changed = changed or {}
    return sorted(evaluated, key=lambda n: (-round(n.reward or 0.0, 12), changed.get(n.id, 0), n.depth, n.id))


def reward(success_rate: float, mrr: float, lambda_corr: float = 0.5, lambda_ret: float = 0.5) -> float:
    """``R = λ_corr · success rate + λ_ret · MRR``."""
    return lambda_corr * success_rate + lambda_ret * mrr

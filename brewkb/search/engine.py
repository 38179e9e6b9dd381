"""The search loop over KB states: EG-MCTS, greedy and iterative.

The loop receives its expand and evaluate steps as objects (``Expands``,
``Evaluates``) and persists through ``SearchStore``; everything it knows it
can rebuild from git, so a run resumes where it stopped without
re-evaluating any evaluated node.

Per iteration: select a node of every concept's tree, expand them all (one
batch of agent episodes), write each candidate as a node commit, evaluate the
iteration's candidates in their hybrid KBs, write the rewards as notes,
back-propagate, and gather the chosen node of every tree into a merge on the
run's ``kb`` branch. Iteration 0 commits, evaluates and gathers the root
documents.

Strategies:
  mcts       UCT selection, ``samples`` children per expansion, ``iterations`` rounds;
             the KB takes each tree's node with the best mean reward.
  greedy     expands the kept node with ``width`` children and keeps the best
             child; ``depth`` rounds; never revisits.
  iterative  one chain: each round refines the latest document, which replaces
             it; ``width × depth`` rounds.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from brewkb.config import SearchConfig
from brewkb.errors import GitError, RunError
from brewkb.events import Event, EventSink, null_sink
from brewkb.recipes import Recipe, parse_recipe, render_recipe
from brewkb.search.evaluate import Evaluates
from brewkb.search.expand import Expands
from brewkb.search.store import SearchStore, StoredRun
from brewkb.search.tree import Node, Tree, best_node, changed_chars, uct_select

__all__ = ["SearchSpec", "SearchResult", "search", "rebuild"]

SAMPLE_STRIDE = 1000


@dataclass(frozen=True)
class SearchSpec:
    strategy: str = "mcts"
    iterations: int = 10
    width: int = 3
    depth: int = 3
    samples: int = 3
    exploration: float = 2**0.5
    lambda_corr: float = 0.5
    lambda_ret: float = 0.5

    @classmethod
    def from_config(cls, config: SearchConfig, **overrides: Any) -> SearchSpec:
        """The configured search, with the options a command line set (``None``: not set)."""
        spec = cls(strategy=config.strategy, iterations=config.iterations, width=config.width, depth=config.depth,
                   samples=config.samples, exploration=config.exploration, lambda_corr=config.lambda_corr,
                   lambda_ret=config.lambda_ret)
        return dataclasses.replace(spec, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> SearchSpec:
        """The spec a run's manifest recorded."""
        try:
            return cls(**data)
        except TypeError as exc:
            raise RunError(f"the run's manifest.json records a search this brewkb cannot read ({exc}); restore the "
                           "manifest from git, or start a new run") from None

    @property
    def rounds(self) -> int:
        return {"mcts": self.iterations, "greedy": self.depth, "iterative": self.width * self.depth}[self.strategy]

    @property
    def per_expansion(self) -> int:
        return {"mcts": self.samples, "greedy": self.width, "iterative": 1}[self.strategy]


@dataclass
class State:
    trees: dict[str, Tree]
    commits: dict[tuple[str, int], tuple[str, str]]  # (commit, blob)
    samples: dict[tuple[str, int], int]
    gathers: int
    docs: dict[tuple[str, int], Recipe] = field(default_factory=dict)
    """Documents parsed so far (the others are parsed from their blob on demand)."""
    eval_run: int = 0
    """Evaluation episodes run over the whole run, as the notes record them."""
    eval_reused: int = 0


@dataclass(frozen=True)
class SearchResult:
    trees: dict[str, Tree]
    chosen: dict[str, int]
    docs: dict[str, Recipe]
    kb_commit: str | None
    eval_episodes_run: int
    """Evaluation episodes over the whole run, from the notes."""
    eval_episodes_reused: int
    episodes_run: int
    """Episodes this process ran and reused (expansion and evaluation)."""
    episodes_reused: int


def rebuild(store: SearchStore, concepts: list[str], stored: StoredRun | None = None) -> State:
    """The search state from git: trees, documents, rewards, gathers
    (``stored``: what ``store.load()`` already returned)."""
    stored = stored if stored is not None else store.load()
    state = State({c: Tree(c) for c in concepts}, {}, {}, stored.gathers)
    for concept, nodes in stored.nodes.items():
        if concept not in state.trees:
            continue
        tree = state.trees[concept]
        for n in nodes:
            if n.id != max(tree.nodes, default=-1) + 1:  # SearchStore.load refuses a gap it cannot fill
                raise GitError(f"{concept}: node n{max(tree.nodes, default=-1) + 1} of run {store.run} is missing")
            tree.add(n.parent, n.iteration)
            state.commits[(concept, n.id)] = (n.commit, n.blob)
            state.samples[(concept, n.id)] = n.sample
        for n in nodes:
            if n.note is not None:
                tree.backpropagate(n.id, float(n.note["reward"]))
                usage = n.note.get("usage", {})
                state.eval_run += usage.get("episodes_run", 0)
                state.eval_reused += usage.get("episodes_reused", 0)
    return state


def _as_of(tree: Tree, iteration: int) -> Tree:
    """``tree`` as it was when ``iteration`` was gathered (itself, unless a
    resumed run gathers again iterations whose successors exist already)."""
    if all(n.iteration <= iteration for n in tree.nodes.values()):
        return tree
    past = Tree(tree.concept)
    for node in sorted(tree.nodes.values(), key=lambda n: n.id):
        if node.iteration <= iteration:
            past.add(node.parent, node.iteration)
    for node in sorted(tree.nodes.values(), key=lambda n: n.id):
        if node.iteration <= iteration and node.reward is not None:
            past.backpropagate(node.id, node.reward)
    return past


def _greedy_end(tree: Tree) -> Node:
    node = tree.root
    while node.children:
        node = max((tree.nodes[c] for c in node.children), key=lambda n: (n.reward or 0.0, -n.id))
    return node


def _select(spec: SearchSpec, tree: Tree) -> Node | None:
    if spec.strategy == "mcts":
        return uct_select(tree, spec.exploration, spec.width, spec.depth)
    end = _greedy_end(tree) if spec.strategy == "greedy" else tree.nodes[max(tree.nodes)]
    limit = spec.depth if spec.strategy == "greedy" else spec.width * spec.depth
    return end if end.depth < limit and not end.children else None


def _chosen(spec: SearchSpec, tree: Tree, changed: Mapping[int, int] | None = None) -> Node:
    if spec.strategy == "mcts":
        return best_node(tree, changed)
    evaluated = [n for n in tree.evaluated()]
    if spec.strategy == "greedy":
        return _greedy_end(tree) if _greedy_end(tree).reward is not None else tree.root
    return max(evaluated, key=lambda n: n.id) if evaluated else tree.root


class _Loop:
    def __init__(self, spec: SearchSpec, store: SearchStore, expander: Expands, evaluator: Evaluates,
                 state: State, events: EventSink) -> None:
        self.spec, self.store, self.expander, self.evaluator = spec, store, expander, evaluator
        self.state, self.events = state, events
        self._changed: dict[tuple[str, int], int] = {}  # a node's document and parent never change

    def doc(self, key: tuple[str, int]) -> Recipe:
        if key not in self.state.docs:
            self.state.docs[key] = parse_recipe(self.store.text(self.state.commits[key][1]))
        return self.state.docs[key]

    def changed(self, concept: str, tree: Tree) -> dict[int, int]:
        """Characters changed from the parent, for the nodes tied at the best
        own reward (``best_node``'s first tie-break); read only when there is a tie."""
        evaluated = [n for n in tree.evaluated() if n.parent is not None]
        if not evaluated:
            return {}
        top = max(round(n.reward or 0.0, 12) for n in tree.evaluated())
        tied = [n for n in evaluated if round(n.reward or 0.0, 12) == top]
        if len(tied) < 2:
            return {}
        text = lambda node: self.store.text(self.state.commits[(concept, node)][1])  # noqa: E731
        for n in tied:
            if (concept, n.id) not in self._changed:
                self._changed[(concept, n.id)] = changed_chars(text(n.parent), text(n.id))
        return {n.id: self._changed[(concept, n.id)] for n in tied}

    def current(self) -> dict[str, Recipe]:
        """The KB of the last gather, read from the ``kb`` branch (so a resumed
        iteration starts from exactly what the interrupted one did)."""
        parsed = {self.state.commits[k][1]: doc for k, doc in self.state.docs.items()}
        return {c: parsed.get(blob) or parse_recipe(self.store.text(blob))
                for c, blob in self.store.kb_blobs(sorted(self.state.trees)).items()}

    def _write(self, concept: str, parent: int | None, iteration: int, sample: int, doc: Recipe) -> None:
        tree = self.state.trees[concept]
        parent_commit = self.state.commits[(concept, parent)][0] if parent is not None else self.store.base
        node = tree.add(parent, iteration)
        commit, blob = self.store.write_node(concept, node.id, parent, parent_commit, iteration, sample,
                                             render_recipe(doc), doc.sources)
        key = (concept, node.id)
        self.state.commits[key], self.state.samples[key] = (commit, blob), sample
        # the document as git holds it, as a resumed run reads it back (``doc`` itself when it was parsed from that text)
        held = self.store.text(blob)
        self.state.docs[key] = doc if doc.source == held else parse_recipe(held)

    def _step(self, message: str) -> None:
        self.events(Event("step", "search", message=message))

    async def _evaluate(self, iteration: int, current: Mapping[str, Recipe]) -> None:
        keys = [(c, n.id) for c, t in sorted(self.state.trees.items()) for n in t.nodes.values()
                if n.iteration == iteration]
        name = {k: f"{k[0]}/n{k[1]}" for k in keys}
        pending = [k for k in keys if self.state.trees[k[0]].nodes[k[1]].reward is None]
        if not pending:
            return
        candidates = {name[k]: (k[0], self.doc(k)) for k in keys}
        self.evaluator.cache.begin(f"{iteration}/evaluate")
        results = await self.evaluator.evaluate(candidates, current, only=[name[k] for k in pending])
        self._step(f"iteration {iteration}: {len(pending)} candidates evaluated")
        notes = {}
        for k in pending:
            e = results[name[k]]
            notes[self.state.commits[k][0]] = e.note(self.spec.lambda_corr, self.spec.lambda_ret,
                                                     run=self.store.run, concept=k[0], node=k[1],
                                                     iteration=iteration)
        self.store.write_notes(notes, iteration)
        self._step(f"iteration {iteration}: rewards noted")
        for k in pending:
            self.state.trees[k[0]].backpropagate(k[1], results[name[k]].reward)
            self.state.eval_run += results[name[k]].episodes_run
            self.state.eval_reused += results[name[k]].episodes_reused

    def _gather(self, iteration: int) -> None:
        best = {}
        lines = []
        for concept, tree in sorted(self.state.trees.items()):
            tree = _as_of(tree, iteration)
            node = _chosen(self.spec, tree, self.changed(concept, tree))
            commit, blob = self.state.commits[(concept, node.id)]
            best[concept] = (commit, blob, node.id)
            lines.append(f"{concept}: n{node.id} (mean reward {node.mean:.3f}, {node.visits} evaluated)")
        self.store.gather(iteration, best, "\n".join(lines))
        self.state.gathers = iteration + 1

    async def roots(self, roots: Mapping[str, Recipe]) -> None:
        missing = [c for c in sorted(roots) if not self.state.trees[c].nodes]
        with self.store.writing():
            for concept in missing:
                self._write(concept, None, 0, 0, roots[concept])
        if missing:
            self._step(f"iteration 0: {len(missing)} roots committed")
        await self._evaluate(0, {c: self.doc((c, 0)) for c in self.state.trees})
        if self.state.gathers == 0:
            self._gather(0)

    async def iteration(self, it: int) -> None:
        current = self.current()
        wanted = [it * SAMPLE_STRIDE + j for j in range(self.spec.per_expansion)]
        requests = {}
        for concept, tree in sorted(self.state.trees.items()):
            made = [n for n in tree.nodes.values() if n.iteration == it]
            parent = made[0].parent if made else (node.id if (node := _select(self.spec, tree)) else None)
            if parent is None:
                continue
            have = {self.state.samples[(concept, n.id)] for n in made}
            missing = [s for s in wanted if s not in have]
            if missing:
                requests[concept] = (self.doc((concept, parent)), missing, parent)
        if requests:
            self.evaluator.cache.begin(f"{it}/expand")
            docs = await self.expander.expand({c: (d, s) for c, (d, s, _) in requests.items()}, current)
            self._step(f"iteration {it}: {len(requests)} nodes expanded")
            with self.store.writing():
                for concept, (_, missing, parent) in sorted(requests.items()):
                    for sample in missing:
                        if sample in docs[concept]:
                            self._write(concept, parent, it, sample, docs[concept][sample])
            self._step(f"iteration {it}: candidates committed")
        await self._evaluate(it, current)
        self._gather(it)


@contextmanager
def _set_aside() -> Iterator[Callable[[], None]]:
    """Yields ``keep``, which sets every object alive now aside from the
    garbage collector's passes (``gc.freeze``) until the block ends. What an
    iteration leaves (nodes, documents, episodes) lives until the search ends:
    set aside, the full passes walk only the next iteration's objects instead
    of every node so far (at 30,000 nodes, passes of 0.4 s). At the end they
    go back to the oldest generation, so what became garbage is collected. A
    caller that froze objects of its own (before a fork, say) keeps the
    collector as it set it."""
    active = gc.get_freeze_count() == 0

    def keep() -> None:
        if active:
            gc.freeze()

    keep()
    try:
        yield keep
    finally:
        if active:
            gc.unfreeze()


async def search(spec: SearchSpec, store: SearchStore, expander: Expands, evaluator: Evaluates,
           roots: Mapping[str, Recipe], events: EventSink = null_sink) -> SearchResult:
    """Run (or resume) the search until ``spec.rounds`` iterations are gathered,
    on the caller's event loop."""
    stored = store.load()
    store.repair()  # what the record lost and the rest of it still says is put back first
    state = rebuild(store, sorted(roots), stored)
    loop = _Loop(spec, store, expander, evaluator, state, events)
    rooted = state.gathers > 0 and all(t.nodes and t.root.reward is not None for t in state.trees.values())
    finished = rooted and state.gathers > spec.rounds  # a run's final gather comes after its last iteration
    if finished:
        events(Event("stage_skipped", "search", message="already done"))
    else:
        events(Event("stage_started", "search", done=state.gathers, total=spec.rounds + 1))
    started = time.monotonic()
    with _set_aside() as keep:
        if not rooted:
            await loop.roots(roots)
            events(Event("item_done", "search", done=1, total=spec.rounds + 1, message="iteration 0"))
            keep()
        for it in range(max(1, state.gathers), spec.rounds + 1):
            await loop.iteration(it)
            events(Event("item_done", "search", done=it + 1, total=spec.rounds + 1, message=f"iteration {it}"))
            keep()
    store.keep_branches()
    if not finished:
        events(Event("stage_finished", "search", message=f"in {time.monotonic() - started:.1f} s"))
    chosen = {c: _chosen(spec, t, loop.changed(c, t)).id for c, t in state.trees.items()}
    kb = store.git.read_ref(f"refs/heads/brew/{store.run}/kb")
    return SearchResult(state.trees, chosen, {c: loop.doc((c, n)) for c, n in chosen.items()}, kb,
                        state.eval_run, state.eval_reused, evaluator.cache.run, evaluator.cache.reused)


def note_of(result: SearchResult, concept: str) -> dict[str, Any]:
    tree = result.trees[concept]
    node = tree.nodes[result.chosen[concept]]
    return {"node": node.id, "mean": node.mean, "reward": node.reward, "visits": node.visits,
            "root_reward": tree.root.reward, "nodes": len(tree.nodes)}

"""The end of a search: re-evaluate each tree's best candidates under the
final KB, keep a recipe's base version unless a candidate beats it (the
no-regression gate), and record the decision as the run's final gather.

Rewards of different iterations were measured in different hybrid KBs, so the
candidates of every tree (of its ``final_candidates`` nodes with the best own
reward, those whose own reward is at least the root's) and the concept's *base version* (the recipe the base commit already
holds, or the root written before any search) are evaluated again, each in
the KB of the last gather with only its own concept swapped. A candidate
replaces the base version only if its final reward is more than the base's
plus ``min_gain`` (a tie keeps the base version). The final evaluation is a note on the final gather commit,
so a resumed run reads it instead of evaluating again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from brewkb.recipes import Recipe, parse_recipe
from brewkb.search.evaluate import Evaluates
from brewkb.search.store import SearchStore
from brewkb.search.tree import Tree, best_node, changed_chars, ranked

__all__ = ["FinalChoice", "finalize", "recorded_choices", "chosen_nodes"]

BASE = "base"


@dataclass(frozen=True)
class FinalChoice:
    concept: str
    node: int | None
    """The node whose document the PR holds; ``None`` when the recipe the base
    commit holds is kept."""
    kept: bool
    """No candidate beat the base version: the PR keeps it."""
    base: str
    """``"kb"`` (the base commit holds the recipe) or ``"root"``."""
    base_reward: float
    reward: float
    """Final reward of what the PR holds."""
    candidates: dict[str, float]
    """Final reward by candidate (``n<id>`` or ``base``)."""
    split: str
    """Tasks of the final evaluation: ``eval``, or ``train`` for a concept with no eval tasks."""

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "kept": self.kept, "base": self.base, "base_reward": self.base_reward,
                "reward": self.reward, "candidates": dict(self.candidates), "split": self.split}

    @classmethod
    def from_json(cls, concept: str, data: Mapping[str, Any]) -> FinalChoice:
        return cls(concept, data["node"], bool(data["kept"]), data["base"], float(data["base_reward"]),
                   float(data["reward"]), {k: float(v) for k, v in data["candidates"].items()}, data["split"])


async def finalize(store: SearchStore, evaluator: Evaluates, trees: Mapping[str, Tree], *, candidates: int,
             min_gain: float, lambdas: tuple[float, float], iteration: int) -> dict[str, FinalChoice]:
    """Choose the PR's document of every concept and write the final gather
    (once: a run that already has it returns the recorded choices)."""
    recorded = recorded_choices(store)
    if recorded:
        store.settle_final()
        return recorded
    loaded = store.load()
    store.repair()  # a node branch deleted while the search ran is put back before the PR names it
    stored = {(n.concept, n.id): n for ns in loaded.nodes.values() for n in ns}
    text = {k: store.text(n.blob) for k, n in stored.items()}
    existing = store.git.read_folder(store.base, store.recipes_dir)
    final = store.final_commit()
    last = store.git.read_commit(final)["parent"][0] if final else None  # the KB before the final gather
    current = {c: parse_recipe(store.text(b)) for c, b in store.kb_blobs(sorted(trees), last).items()}
    pool: dict[str, tuple[str, Recipe]] = {}
    for concept, tree in sorted(trees.items()):
        # characters changed only break ties: measured for the nodes that can reach the first places
        order = sorted(round(n.reward or 0.0, 12) for n in tree.evaluated())[::-1]
        cut = order[min(candidates, len(order)) - 1] if order else 0.0
        changed = {n.id: changed_chars(text[(concept, n.parent)], text[(concept, n.id)])
                   for n in tree.evaluated() if n.parent is not None and round(n.reward or 0.0, 12) >= cut}
        root_reward = tree.root.reward or 0.0
        for node in ranked(tree, changed)[:candidates]:
            # a document the search measured below its root is no candidate, whatever a second measurement says
            if (node.reward or 0.0) >= root_reward:
                pool[f"{concept}/n{node.id}"] = (concept, parse_recipe(text[(concept, node.id)]))
        held = existing.get(store.path(concept))
        base_key = f"{concept}/{BASE}" if held is not None else f"{concept}/n0"
        pool[base_key] = (concept, parse_recipe(held.decode()) if held is not None else
                          parse_recipe(text[(concept, 0)]))
    evaluator.cache.begin("final")
    results = await evaluator.evaluate(pool, current)
    choices, notes = {}, {}
    best: dict[str, tuple[str, str, int | str]] = {}
    for concept in sorted(trees):
        mine = {k.rsplit("/", 1)[1]: e for k, e in results.items() if k.rsplit("/", 1)[0] == concept}
        in_kb = BASE in mine
        base_label = BASE if in_kb else "n0"
        base_reward = mine[base_label].reward
        rivals = [k for k in mine if k != base_label]  # best-ranked first: max keeps the first of equals
        top = max(rivals, key=lambda k: mine[k].reward) if rivals else None
        beats = top is not None and mine[top].reward > base_reward + min_gain
        picked = int(top[1:]) if beats and top else None if in_kb else 0
        choice = FinalChoice(concept, picked, not beats, "kb" if in_kb else "root", base_reward,
                             mine[top].reward if beats and top else base_reward,
                             {k: e.reward for k, e in mine.items()}, mine[base_label].split)
        choices[concept] = choice
        if picked is not None:
            best[concept] = (stored[(concept, picked)].commit, stored[(concept, picked)].blob, picked)
        else:
            entry = store.git.lookup(store.base_tree, store.path(concept))
            best[concept] = (store.base, entry.sha if entry else "", BASE)
        # no episode counters: a resumed run replays these episodes from its cache, and the note must not differ
        notes[concept] = choice.to_json()
    lines = [f"{c}: {'kept the base version' if ch.kept else f'n{ch.node}'} "
             f"(final reward {ch.reward:.3f}, base {ch.base_reward:.3f})" for c, ch in sorted(choices.items())]
    # a run killed between the final gather and its note has the gather already: only the note is missing
    commit = store.final_commit() or store.gather(
        iteration, best, "Final evaluation under the last gathered KB.\n" + "\n".join(lines), final=True)
    store.git.add_notes({commit: {"run": store.run, "final": True, "lambda_corr": lambdas[0],
                                  "lambda_ret": lambdas[1], "candidates_per_concept": candidates,
                                  "min_gain": min_gain, "concepts": notes}},
                        f"brew({store.run}): final evaluation\n", timestamp=store.timestamp(iteration))
    return choices


def recorded_choices(store: SearchStore) -> dict[str, FinalChoice]:
    """The final choices of a finished run (empty before its final gather)."""
    note = store.final_note()
    return {c: FinalChoice.from_json(c, d) for c, d in note["concepts"].items()} if note else {}


def chosen_nodes(trees: Mapping[str, Tree], choices: Mapping[str, FinalChoice]) -> dict[str, int]:
    """The node each tree's drawing marks: the PR's document (the root when the
    PR keeps the recipe of the base commit), or the best own reward before
    the final evaluation."""
    return {c: (choices[c].node or 0) if c in choices else best_node(t).id for c, t in trees.items()}

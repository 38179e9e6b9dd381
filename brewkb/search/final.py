"""The end of a search: re-evaluate each tree's best candidates under the
final KB, keep a recipe's base version unless a candidate beats it (the
no-regression gate), and record the decision as the run's final gather.

Rewards of different iterations were measured in different hybrid KBs, so the
candidates of every tree (of its ``final_candidates`` nodes with the best own
reward, those whose own reward is at least the root's) and the concept's *base version* (the recipe the base commit already
holds, or the root written before any search) are evaluated again, each in
the KB of the last gather with only its own concept swapped. A candidate
replaces the base version only if its final reward is more than the base's
plus ``min_gain`` (a tie keeps the base version).

Then the gate against having no recipe at all: a recipe the PR would add or
change enters only if its own final reward is above zero and its
leave-one-out effect is not negative beyond noise. The effect is measured in
the final KB on the eval tasks whose context holds the recipe (of any
concept: a recipe also serves requests of others), with the recipe and
without it (success on an environment, the retrieval measure on logs); it is
negative beyond noise when a one-sided paired t-test at 95 % says so: the
mean of the per-task differences plus Student's t times their standard error
is below zero (never on fewer than two tasks). A recipe whose file would be
larger than ``max_bytes`` (``kb.max_recipe_kb``) fails the gate too: the index
would leave it out, so it could serve no one. A new recipe that fails the gate is
left out of the PR; a changed one keeps its base version. The final
evaluation is a note on the final gather commit, so a resumed run reads it
instead of evaluating again.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from brewkb.errors import RecipeError
from brewkb.recipes import Recipe, parse_recipe, render_recipe
from brewkb.search.evaluate import Evaluates
from brewkb.search.store import SearchStore
from brewkb.search.tree import Tree, best_node, changed_chars, ranked

__all__ = ["FinalChoice", "Effect", "finalize", "recorded_choices", "chosen_nodes", "leave_one_out"]

BASE = "base"
LEFT_OUT = "left-out"

log = logging.getLogger(__name__)


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
    effect: Effect | None = None
    """The leave-one-out effect of the document the gate looked at (``None`` when nothing was added or changed)."""
    left_out: str = ""
    """Why the gate kept the added or changed document out of the PR (empty: it did not)."""

    def to_json(self) -> dict[str, Any]:
        out = {"node": self.node, "kept": self.kept, "base": self.base, "base_reward": self.base_reward,
               "reward": self.reward, "candidates": dict(self.candidates), "split": self.split}
        if self.effect is not None:
            out["effect"] = self.effect.to_json()
        if self.left_out:
            out["left_out"] = self.left_out
        return out

    @classmethod
    def from_json(cls, concept: str, data: Mapping[str, Any]) -> FinalChoice:
        effect = data.get("effect")
        return cls(concept, data["node"], bool(data["kept"]), data["base"], float(data["base_reward"]),
                   float(data["reward"]), {k: float(v) for k, v in data["candidates"].items()}, data["split"],
                   Effect(**effect) if effect else None, str(data.get("left_out", "")))

    @property
    def adds(self) -> bool:
        """The PR holds a recipe the base commit does not."""
        return self.base == "root" and not self.left_out


@dataclass(frozen=True)
class Effect:
    """A recipe's leave-one-out effect on its eval tasks: the mean of the
    per-task differences with and without it, and their standard error."""

    tasks: int
    with_recipe: float
    without_recipe: float
    effect: float
    error: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def harmful(self) -> bool:
        """Negative beyond noise: a one-sided paired t-test at 95 % (never on fewer than two tasks)."""
        return self.tasks >= 2 and self.effect + t_95(self.tasks - 1) * self.error < 0


T_95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
        1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697)
"""Student's t at 0.95 (one-sided) for 1 to 30 degrees of freedom."""


def t_95(df: int) -> float:
    return T_95[df - 1] if df <= len(T_95) else 1.645


def leave_one_out(pairs: Sequence[tuple[float, float]]) -> Effect:
    """The effect from per-task values with and without the recipe."""
    if not pairs:
        return Effect(0, 0.0, 0.0, 0.0, 0.0)
    diffs = np.array([a - b for a, b in pairs], dtype=float)
    error = float(diffs.std(ddof=1) / np.sqrt(len(diffs))) if len(diffs) > 1 else 0.0
    return Effect(len(pairs), round(float(np.mean([a for a, _ in pairs])), 6),
                  round(float(np.mean([b for _, b in pairs])), 6), round(float(diffs.mean()), 6), round(error, 6))


async def finalize(store: SearchStore, evaluator: Evaluates, trees: Mapping[str, Tree], *, candidates: int,
             min_gain: float, lambdas: tuple[float, float], iteration: int,
             max_bytes: int | None = None) -> dict[str, FinalChoice]:
    """Choose the PR's document of every concept and write the final gather
    (once: a run that already has it returns the recorded choices);
    ``max_bytes``: the largest recipe file the gate lets in."""
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
        held = _readable(store, concept, existing.get(store.path(concept)))
        base_key = f"{concept}/{BASE}" if held is not None else f"{concept}/n0"
        pool[base_key] = (concept, held if held is not None else parse_recipe(text[(concept, 0)]))
    evaluator.cache.begin("final")
    results = await evaluator.evaluate(pool, current)
    choices: dict[str, FinalChoice] = {}
    for concept in sorted(trees):
        mine = {k.rsplit("/", 1)[1]: e for k, e in results.items() if k.rsplit("/", 1)[0] == concept}
        in_kb = BASE in mine
        base_label = BASE if in_kb else "n0"
        base_reward = mine[base_label].reward
        rivals = [k for k in mine if k != base_label]  # best-ranked first: max keeps the first of equals
        top = max(rivals, key=lambda k: mine[k].reward) if rivals else None
        beats = top is not None and mine[top].reward > base_reward + min_gain
        picked = int(top[1:]) if beats and top else None if in_kb else 0
        choices[concept] = FinalChoice(concept, picked, not beats, "kb" if in_kb else "root", base_reward,
                                       mine[top].reward if beats and top else base_reward,
                                       {k: e.reward for k, e in mine.items()}, mine[base_label].split)
    choices = await _gate(evaluator, choices, pool, max_bytes)
    best: dict[str, tuple[str, str, int | str]] = {}
    notes = {}
    for concept, choice in sorted(choices.items()):
        if choice.node is not None:
            best[concept] = (stored[(concept, choice.node)].commit, stored[(concept, choice.node)].blob, choice.node)
        else:
            entry = store.git.lookup(store.base_tree, store.path(concept))
            best[concept] = (store.base, entry.sha if entry else "", BASE if entry else LEFT_OUT)
        # no episode counters: a resumed run replays these episodes from its cache, and the note must not differ
        notes[concept] = choice.to_json()
    lines = [f"{c}: {_outcome(ch)} (final reward {ch.reward:.3f}, base {ch.base_reward:.3f})"
             for c, ch in sorted(choices.items())]
    # a run killed between the final gather and its note has the gather already: only the note is missing
    commit = store.final_commit() or store.gather(
        iteration, best, "Final evaluation under the last gathered KB.\n" + "\n".join(lines), final=True)
    store.git.add_notes({commit: {"run": store.run, "final": True, "lambda_corr": lambdas[0],
                                  "lambda_ret": lambdas[1], "candidates_per_concept": candidates,
                                  "min_gain": min_gain, "concepts": notes}},
                        f"brew({store.run}): final evaluation\n", timestamp=store.timestamp(iteration))
    return choices


async def _gate(evaluator: Evaluates, choices: dict[str, FinalChoice], pool: Mapping[str, tuple[str, Recipe]],
                max_bytes: int | None = None) -> dict[str, FinalChoice]:
    """The choices with the recipes that would add or change a document and
    do not help, or are too large to be indexed, left out (see the module docstring)."""
    final = {c: pool[f"{c}/n{ch.node}" if ch.node is not None else f"{c}/{BASE}" if ch.base == "kb" else f"{c}/n0"][1]
             for c, ch in choices.items()}
    gated = sorted(c for c, ch in choices.items() if ch.node is not None or ch.base == "root")
    if not gated:
        return choices
    pairs = await evaluator.leave_one_out(gated, final)
    out = dict(choices)
    for concept in gated:
        choice = choices[concept]
        effect = leave_one_out(pairs[concept])
        size = len(render_recipe(final[concept]).encode()) if max_bytes is not None else 0
        reason = (f"its file would be {size / 1024:.1f} KB, over kb.max_recipe_kb ({max_bytes // 1024} KB): the index "
                  "would leave it out" if max_bytes is not None and size > max_bytes else
                  f"final reward {choice.reward:.3f}" if choice.reward <= 0 else
                  f"leave-one-out effect {effect.effect:+.3f} (standard error {effect.error:.3f}) on {effect.tasks} tasks"
                  if effect.harmful else "")
        if not reason:
            out[concept] = dataclasses.replace(choice, effect=effect)
        else:  # a new recipe is left out; a changed one keeps its base version
            out[concept] = dataclasses.replace(choice, node=None, kept=True, reward=choice.base_reward,
                                               effect=effect, left_out=reason)
    return out


def _readable(store: SearchStore, concept: str, held: bytes | None) -> Recipe | None:
    """The base KB's recipe of ``concept``, or ``None`` when it has none or
    one that does not parse (then the concept is a new recipe, and says so)."""
    if held is None:
        return None
    try:
        return parse_recipe(held.decode())
    except (RecipeError, UnicodeDecodeError) as exc:
        log.warning("%s at %s does not parse (%s): its concept is chosen as a new recipe, and the PR replaces the "
                    "file", store.path(concept), store.base[:12], exc)
        return None


def _outcome(choice: FinalChoice) -> str:
    if choice.left_out:
        return f"left out ({choice.left_out})" if choice.base == "root" else f"kept the base version ({choice.left_out})"
    return "kept the base version" if choice.kept and choice.base == "kb" else f"n{choice.node or 0}"


def recorded_choices(store: SearchStore) -> dict[str, FinalChoice]:
    """The final choices of a finished run (empty before its final gather)."""
    note = store.final_note()
    return {c: FinalChoice.from_json(c, d) for c, d in note["concepts"].items()} if note else {}


def chosen_nodes(trees: Mapping[str, Tree], choices: Mapping[str, FinalChoice]) -> dict[str, int]:
    """The node each tree's drawing marks: the PR's document (the root when the
    PR keeps the recipe of the base commit), or the best own reward before
    the final evaluation."""
    return {c: (choices[c].node or 0) if c in choices else best_node(t).id for c, t in trees.items()}

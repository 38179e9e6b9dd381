"""The record of a finished run, as git holds it: what changed, the final
rewards, the held-out evaluation, and the tables a pull request shows.

It reads git and the run folder only, so it works on any clone that fetched
the run."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brewkb.git.refs import BrewRef
from brewkb.git.store import parse_trailers
from brewkb.kb import KB
from brewkb.run.lookup import require_run
from brewkb.search.engine import rebuild
from brewkb.search.final import FinalChoice, chosen_nodes, recorded_choices
from brewkb.search.store import SearchStore, find_base
from brewkb.search.tree import Tree

__all__ = ["EVAL_FILE", "FINAL_HEADER", "LEFT_OUT", "left_out", "final_rows", "RecipeChange", "RunView",
           "load_run", "eval_table", "effects_table", "change_table", "final_label", "logs_table"]

EVAL_FILE = "eval.json"
"""The held-out evaluation of a run, in its folder."""

FINAL_HEADER = "| recipe | base reward | final reward | document | nodes tried | note |"

LOGS_WROTE = "## What the logs wrote"
"""The heading that starts a PR's sections on log text (written by ``brewkb.run.prbody``)."""

LEFT_OUT = "Left out:"
"""How the paragraph of a PR's record starts that names the failed items a run went on without."""

_FAILED = {"rollouts": "train episodes", "rollouts-eval": "eval episodes", "grades": "grades",
           "reflections": "reflections", "integrate": "recipes"}


def left_out(stages: dict[str, Any]) -> str:
    """The PR's paragraph on items that failed and that the run went on without
    (``stages.accept_failed``), from the manifest's stage entries; empty when none."""
    counts = [f"{n} {_FAILED[stage]}" for stage, info in stages.items() if stage in _FAILED
              and isinstance(info, dict) and (n := int(info.get("failed", 0)) + int(info.get("failed_to_run", 0)))]
    if not counts:
        return ""
    return (f"{LEFT_OUT} {', '.join(counts)} failed (an LLM call or an episode that could not be done) and the run "
            "went on without them (stages.accept_failed); failures.jsonl in the run folder names each. What this "
            "PR measured did not see them.")


_KEPT = {"kb": "kept: no candidate beat it", "root": "new: no later version beat its first"}


def final_rows(choices: dict[str, FinalChoice], nodes: dict[str, int]) -> list[str]:
    """The reward table of a run's final evaluation: one row per recipe."""
    rows = [FINAL_HEADER, "|---|---:|---:|---|---:|---|"]
    for concept, ch in sorted(choices.items()):
        doc = ("left out" if ch.left_out and ch.base == "root" else "base (unchanged)" if ch.node is None
               else "root") if ch.kept else f"n{ch.node}"
        notes = ([f"left out by the gate: {ch.left_out}"] if ch.left_out else
                 [_KEPT[ch.base]] if ch.kept else []) + \
            (["evaluated on its train tasks (no eval tasks)"] if ch.split == "train" else [])
        rows.append(f"| `{concept}` | {ch.base_reward:.3f} ({ch.base}) | {ch.reward:.3f} | {doc} | "
                    f"{nodes.get(concept, 0)} | {'; '.join(notes)} |")
    return rows


@dataclass(frozen=True)
class RecipeChange:
    name: str
    status: str  # "added" | "rewritten" | "unchanged"
    added: int
    removed: int
    root_reward: float | None
    """The base version's reward under the final evaluation (the root's own reward for runs without one)."""
    final_reward: float | None
    """The PR document's reward under the final evaluation."""
    note: str = ""
    """``kept: no candidate beat it``, and whether the concept was evaluated on its train tasks."""


@dataclass(frozen=True)
class RunView:
    """A run as git holds it."""

    run: str
    base: str
    pr: str
    trees: dict[str, Tree]
    best: dict[str, int]
    changes: list[RecipeChange]
    per_iteration: list[dict[str, float]]
    """Concept → reward of the document chosen at each gather; after the final
    gather, the final rewards (what the PR holds, every concept)."""
    eval: dict[str, Any] | None
    record: str = ""
    """The ``pr`` commit's message without subject and trailers: what was
    measured, as the run wrote it (in git, so a fresh clone has it too)."""
    choices: dict[str, FinalChoice] = field(default_factory=dict)
    """The final evaluation's choice per concept (empty for a run without one)."""
    left_out: str = ""
    """The record's paragraph on failed items the run went on without (``left_out``), or empty."""
    from_logs: str = ""
    """The record's sections on what the logs wrote and what was held back (``prbody.logs_section``), or empty."""


def load_run(kb: KB, run: str) -> RunView:
    store = kb.store
    pr = store.read_ref(str(BrewRef.pr(run)))
    if pr is None:
        require_run(kb, run, need="pr")
        raise AssertionError("require_run raises for a run without a pr branch")
    base = find_base(store, run)
    search = SearchStore(store, run, base, kb.recipes_prefix())
    stored = search.load()
    search.report()
    state = rebuild(search, sorted(stored.nodes), stored)
    choices = recorded_choices(search)
    best = chosen_nodes(state.trees, choices)
    prefix = kb.recipes_prefix()
    before = store.read_folder(base, prefix)
    after = store.read_folder(pr, prefix)
    changes = []
    for path in sorted(set(before) | set(after)):
        name = Path(path).stem
        old, new = before.get(path, b"").decode(), after.get(path, b"").decode()
        diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0))
        added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
        removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
        status = "added" if path not in before else "unchanged" if old == new else "rewritten"
        tree = state.trees.get(name)
        if name in choices:
            choice = choices[name]
            note = "; ".join(([_KEPT[choice.base]] if choice.kept else []) +
                             (["evaluated on its train tasks (no eval tasks)"] if choice.split == "train" else []))
            changes.append(RecipeChange(name, status, added, removed, choice.base_reward, choice.reward, note))
        else:
            changes.append(RecipeChange(name, status, added, removed, tree.root.reward if tree else None,
                                        tree.nodes[best[name]].reward if tree else None))
    rewards = {(c, n.id): n.note["reward"] for c, ns in stored.nodes.items() for n in ns if n.note}
    per_iteration = []
    kb_commit = stored.kb_commit
    chain = []
    final = search.final_commit() if choices else None
    while kb_commit and kb_commit != base:
        commit = store.read_commit(kb_commit)
        chain.append((kb_commit, parse_trailers(commit["message"][0]).get("Brew-Best", "")))
        kb_commit = commit["parent"][0]
    for sha, best_line in reversed(chain):
        if sha == final:  # measured again under the final KB: the rewards the change table shows
            per_iteration.append({c: ch.reward for c, ch in choices.items()})
            continue
        chosen = dict(item.split("=n") for item in best_line.split(", ") if "=n" in item)
        per_iteration.append({c: rewards.get((c, int(n)), 0.0) for c, n in chosen.items()})
    eval_file = kb.runs_dir / run / EVAL_FILE
    evaluation = json.loads(eval_file.read_text()) if eval_file.exists() else None
    paragraphs = store.read_commit(pr)["message"][0].strip().split("\n\n")[1:]
    if paragraphs and parse_trailers(paragraphs[-1]):
        paragraphs = paragraphs[:-1]
    # the change table and the body's own audit trail say these already
    paragraphs = [p for p in paragraphs if not p.startswith((FINAL_HEADER, "Audit trail:"))]
    missing = next((p for p in paragraphs if p.startswith(LEFT_OUT)), "")
    start = next((n for n, p in enumerate(paragraphs) if p.startswith(LOGS_WROTE)), len(paragraphs))
    from_logs = paragraphs[start:start + 4]  # its two headings, each with one paragraph
    paragraphs = paragraphs[:start] + paragraphs[start + 4:]
    return RunView(run, base, pr, state.trees, best, changes, per_iteration, evaluation,
                   "\n\n".join(p for p in paragraphs if p != missing), choices, missing, "\n\n".join(from_logs))


def eval_table(evaluation: dict[str, Any]) -> list[str]:
    rows = [f"Evaluation on the {evaluation['split']} split ({evaluation['repeats']} episode{'' if evaluation['repeats'] == 1 else 's'} per task):", "",
            "| context | success | 95% CI | episodes | mean steps of successes | LLM calls | recipes |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for c in evaluation["columns"]:
        steps = "–" if c["mean_steps_success"] is None else f"{c['mean_steps_success']:.1f}"
        rows.append(f"| {c['label']} | {c['success_rate']:.1%} | {c['ci_low']:.0%}–{c['ci_high']:.0%} | "
                    f"{c['episodes']} | {steps} | "
                    f"{c['llm_calls']} | {'–' if c['recipes'] is None else c['recipes']} |")
    return rows


def effects_table(evaluation: dict[str, Any]) -> list[str]:
    """Each changed recipe's own effect on the tasks that retrieved it."""
    effects = evaluation.get("effects")
    if effects is None:
        return []
    if not effects:
        return ["Per-recipe effect: no changed recipe was retrieved for a test task."]
    rows = ["Per-recipe effect (leave-one-recipe-out on the test tasks that retrieved it; episodes whose context "
            "does not change are reused):", "",
            "| recipe | tasks | success with | without | effect | episodes run | reused |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for e in effects:
        flag = " ⚠ negative" if e["effect"] < 0 else ""
        rows.append(f"| `{e['recipe']}` | {e['tasks']} | {e['with_recipe']:.1%} | {e['without_recipe']:.1%} | "
                    f"{e['effect']:+.1%}{flag} | {e['episodes_run']} | {e['episodes_reused']} |")
    return rows


def logs_table(evaluation: Mapping[str, Any]) -> list[str]:
    """A comparison on held-out logs (``LogEvaluation.to_json``) as markdown:
    the verdict, then recurring and new requests apart, each with its cases,
    every arm's measures for both queries and KB − baseline with its paired
    bootstrap 95 % interval."""
    parts = evaluation.get("parts", {})
    rows = [f"{evaluation['cases']} of {evaluation['conversations']} held-out conversations scored (passed, with a "
            f"write): {parts.get('recurring', 0)} recurring (the task is in what the KB learned from), "
            f"{parts.get('new', 0)} new. MRR, top-1 and top-3 coverage: the first result whose steps name each write "
            "the conversation made; step F1: every step the first result tells the agent to take (steps taken only "
            "when asked included) against the distinct tools the conversation called. Scored by retrieval: no "
            "language model judges these figures (see docs/distill.md)."]
    if evaluation.get("verdict"):
        rows += ["", evaluation["verdict"]]
    for part, n in parts.items():
        if not n:
            rows += ["", f"**{part.capitalize()} requests**: none."]
            continue
        rows += ["", f"**{part.capitalize()} requests** ({n} conversations)", "",
                 "| memory | documents | MRR | top-1 | top-3 cover | step F1 | MRR, first turn | top-1, first turn "
                 "| step F1, first turn |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for arm in evaluation["arms"]:
            s, f = arm["parts"][part]["conversation"], arm["parts"][part]["first turn"]
            rows.append(f"| {arm['label']} | {arm['documents']} | {s['mrr']:.3f} | {s['top1']:.3f} | "
                        f"{s['cover3']:.3f} | {s['step_f1']:.3f} | {f['mrr']:.3f} | {f['top1']:.3f} | "
                        f"{f['step_f1']:.3f} |")
        found = [c for c in evaluation.get("comparisons", []) if c["part"] == part]
        if not found:
            continue
        if found[0]["differences"] is None:
            rows += ["", f"Not enough held-out conversations to compare ({n}): no difference is estimated."]
            continue
        rows += ["", "| KB − memory (95 % CI) | query | MRR | top-1 | step F1 |", "|---|---|---:|---:|---:|"]
        for c in found:
            d = c["differences"]
            rows.append(f"| {c['kb']} − {c['rival']} | {c['query']} | " + " | ".join(
                f"{d[m]['mean']:+.3f} ({d[m]['low']:+.3f} to {d[m]['high']:+.3f})" for m in ("mrr", "top1", "step_f1"))
                + " |")
    return rows


def change_table(view: RunView) -> list[str]:
    rows = ["| recipe | change | lines | base reward | final reward | note |", "|---|---|---:|---:|---:|---|"]
    for c in view.changes:
        root = "–" if c.root_reward is None else f"{c.root_reward:.3f}"
        final = "–" if c.final_reward is None else f"{c.final_reward:.3f}"
        rows.append(f"| `{c.name}` | {c.status} | +{c.added} −{c.removed} | {root} | {final} | {c.note} |")
    return rows


def final_label(view: RunView, concept: str) -> str:
    """What the chosen node of a drawn tree adds to its own (search) reward:
    the final reward the change table shows, and whose document the PR holds."""
    choice = view.choices.get(concept)
    if choice is None:
        return ""
    if choice.kept and choice.base == "kb":
        return f"final R {choice.reward:.3f}: the PR keeps the base commit's recipe"
    return f"final R {choice.reward:.3f} (the PR's)"


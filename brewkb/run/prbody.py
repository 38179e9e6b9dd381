"""Every pull-request body brewkb writes, from values the commands hand it.

- ``refine_message`` and ``distill_message``: the ``pr`` commit's message a
  run writes (its subject, what was measured, the reward tables).
- ``pr_body``: what ``brewkb pr`` prints for a run as git holds it (the
  change table, the evaluation, the search tree of the biggest change).
- ``logs_section``: what the logs wrote into the changed recipes, and what
  of them was held back (both messages carry it; ``pr_body`` shows it again).

The tables themselves are rendered in ``brewkb.run.record`` (the comparison
with the baselines by ``logs_table``, in one function), so a change of a
table's text changes every body that shows it.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from brewkb.errors import RecipeError
from brewkb.git.refs import BrewRef
from brewkb.llm.roles import Insight
from brewkb.recipes import parse_recipe
from brewkb.retrieval.compare import LogEvaluation
from brewkb.retrieval.logeval import procedure_of
from brewkb.run.record import (
    LOGS_WROTE,
    RunView,
    change_table,
    effects_table,
    eval_table,
    final_label,
    final_rows,
    logs_table,
)
from brewkb.search.engine import SearchResult, SearchSpec, note_of
from brewkb.search.final import FinalChoice
from brewkb.search.render import mermaid
from brewkb.search.store import SearchStore
from brewkb.stages.concepts import Concept
from brewkb.trajectories.quote import HeldBack, LogIndex, held_back, log_texts
from brewkb.trajectories.quote import shown as plain
from brewkb.trajectories.schema import Trajectory
from brewkb.trajectories.split import HOLD_OUT_EVERY
from brewkb.trajectories.tools import COMPOUND, NAMED, NOT_THE_AGENTS, line_calls, not_the_agents, passed_names

__all__ = ["refine_message", "distill_message", "comparison_section", "pr_body", "logs_section", "BASE", "NEW",
           "from_logs_of", "LOGS_WROTE", "HELD_BACK"]

BASE, NEW = "base KB", "new KB"
"""The labels of the base KB and the distilled one in a comparison with the baselines."""


def refine_message(run: str, spec: SearchSpec, result: SearchResult, base: str,
                   choices: dict[str, FinalChoice], evidence: str = "", from_logs: str = "") -> str:
    """The ``pr`` commit's message: a pull-request body with the final reward
    table (``brewkb pr`` adds the evaluation and the search tree)."""
    rows = final_rows(choices, {c: len(t.nodes) for c, t in result.trees.items()})
    return (f"brew({run}): {len(result.trees)} recipes refined by {spec.strategy}\n\n"
            f"Base {base[:12]}; strategy {spec.strategy}, {spec.rounds} rounds, width {spec.width}, depth "
            f"{spec.depth}; reward = {spec.lambda_corr}·success + {spec.lambda_ret}·MRR. Final rewards: each tree's "
            f"best candidates and the base version re-evaluated under the last gathered KB; a recipe changes only "
            f"if a candidate's final reward is more than the base's.\n\n" + "\n".join(rows) +
            f"\n\nEvaluation episodes run: {result.eval_episodes_run}; reused instead of run: "
            f"{result.eval_episodes_reused}.\n"
            f"Audit trail: `git log --notes=brew --first-parent brew/{run}/kb`, `brewkb tree {run}`.\n\n"
            + (from_logs + "\n\n" if from_logs else "") + (evidence + "\n" if evidence else "") + f"Brew-Run: {run}\n")


def distill_message(run: str, source: str, spec: SearchSpec, result: SearchResult,
                    choices: dict[str, FinalChoice], concepts: list[Concept], split: tuple[set[str], set[str]],
                    logged: list[Trajectory], grades: dict[str, Any], backend: str,
                    comparison: LogEvaluation | None, missing: str = "", from_logs: str = "",
                    waiting: dict[str, str] | None = None, dropped: Sequence[str] = ()) -> str:
    """The PR body: what was measured, and what could not be; ``waiting``: the
    concepts not searched for want of held-out requests, by why."""
    rows = ["| recipe | eval requests | root reward | base reward (final) | chosen reward (final) | chosen | nodes tried |",
            "|---|---:|---:|---:|---:|---|---:|"]
    by_slug = {c.slug: c for c in concepts}
    for concept in sorted(result.trees):
        info = note_of(result, concept)
        root = "–" if info["root_reward"] is None else f"{info['root_reward']:.3f}"
        held_n = len(by_slug[concept].q_eval) if concept in by_slug else 0
        final = choices[concept]
        chosen = "left out" if final.left_out and final.base == "root" else \
            f"base {final.base} kept" if final.kept else f"n{final.node}"
        rows.append(f"| `{concept}` | {held_n or 'none (train requests)'} | {root} | {final.base_reward:.3f} | "
                    f"{final.reward:.3f} | {chosen} | {info['nodes']} |")
    merges = [f"- `{c.slug}`: {note}" for c in concepts for note in c.merged]
    left = [f"- `{c}`: {ch.left_out}" for c, ch in sorted(choices.items()) if ch.left_out]
    rewarded = sum(t.success is not None and "graded_by" not in t.outcome.detail for t in logged)
    judged_outcomes = sum(t.outcome.detail.get("graded_by") == "judge" for t in logged)
    unlabelled = sum(t.success is None for t in logged)
    judged = sum(1 for v in grades.values() if isinstance(v, dict) and "failed" not in v)
    held, test = split
    gate = "\n".join(left) or ("Nothing: every recipe this PR adds or changes has a final reward above zero and "
                               "no leave-one-out effect on the eval split that is negative beyond noise.")
    return (f"brew({run}): {len(result.trees)} recipes distilled from logged trajectories\n\n"
            f"Source: {len(logged)} trajectories imported from {source} logs; of their tasks, {len(held)} were held "
            f"out to choose recipe versions (eval) and {len(test)} to test the result (test). Personal data was "
            "replaced by placeholders before reflection.\n\n"
            + comparison_section(comparison) +
            "## What was measured\n\n"
            f"- Retrieval only: reward = for each eval request of a recipe's concept, 1 / its rank among the KB times "
            f"the share of the logged conversation's writes its procedure names (λ_corr = {spec.lambda_corr}, "
            f"λ_ret = {spec.lambda_ret}); {spec.strategy}, {spec.rounds} rounds.\n"
            f"- Grades taken from the logs: {rewarded} of {len(logged)} trajectories carry a reward or label; "
            f"{judged_outcomes} unlabelled ones were graded by the judge; {unlabelled} are unlabelled (outcome "
            "unknown: reflection used their tool calls and errors, as neither a success nor a failure); "
            f"{judged} were scored by the rubric judge ({backend}: "
            + ("only the rubrics it can count" if backend == "offline" else "an LLM") + ").\n\n" + "\n".join(rows) + "\n\n"
            + f"## Left out by the gate\n\n{gate}\n\n"
            + ("## Waiting for evidence\n\n" + "\n".join(f"- `{c}`: {why}" for c, why in sorted(waiting.items()))
               + "\n\n" if waiting else "")
            + _not_learned(dropped)
            + "## What could not be measured\n\n"
            "- Task success with the recipes: no environment can re-run these tasks, so λ_corr = 0 and no "
            "recipe's effect on success is known. Evaluate on a live environment before relying on it.\n"
            "- Hindsight relabelling: it needs an environment to re-run relabelled tasks; skipped.\n"
            + ("\n## Concepts merged\n\n" + "\n".join(merges) + "\n" if merges else "")
            + (f"\n{missing}\n" if missing else "")
            + (f"\n{from_logs}\n" if from_logs else "")
            + f"\nAudit trail: `git log --notes=brew --first-parent brew/{run}/kb`, `brewkb tree {run}`.\n\n"
            f"Brew-Run: {run}\n")


def _not_learned(dropped: Sequence[str], shown: int = 20) -> str:
    """What the logs asked for or did that became no concept, and why (the
    concepts stage's notes: too little support, or no action)."""
    if not dropped:
        return ""
    more = f"\n- and {len(dropped) - shown} more (runs/RUN/concepts.json lists them)" if len(dropped) > shown else ""
    # a concept's name may come from what a user wrote: shown in a code span, as held-back texts are
    return ("## Not learned\n\n" + "\n".join(f"- `{plain(note)}`" for note in dropped[:shown]) + more + "\n\n")


def comparison_section(comparison: LogEvaluation | None) -> str:
    """The new KB beside the base KB and the baselines on the test split:
    the verdict, then the tables (``logs_table``)."""
    if comparison is None:
        return ("## Compared with the baselines\n\nNot measured: the logs have fewer than "
                f"{HOLD_OUT_EVERY} tasks, so none was held out for a test.\n\n")
    return "## Compared with the baselines (test split)\n\n" + "\n".join(logs_table(comparison.to_json())) + "\n\n"


def pr_body(view: RunView) -> str:
    """Markdown for a pull request: changes, rewards, eval, and the tree of the biggest change."""
    lines = [f"## brewkb run `{view.run}`", "",
             f"Recipes learned and refined by brewkb from graded agent trajectories (base `{view.base[:12]}`).", ""]
    if view.left_out:
        lines += [f"⚠ {view.left_out}", ""]
    lines += change_table(view) + ["", "Rewards are the final evaluation: each tree's best candidates and the base "
                                   "version (the recipe already in the KB, or the one written before the search) "
                                   "re-evaluated under the final KB; a recipe changes only if a candidate beats it.",
                                   ""]
    if view.eval:
        lines += eval_table(view.eval) + [""]
        if view.eval.get("effects") is not None:
            lines += effects_table(view.eval) + [""]
    elif view.record:  # a distilled run, or a clone without the run folder: what the run wrote in git
        lines += ["As recorded in the `pr` commit:", "", view.record, ""]
    if view.from_logs:
        lines += [view.from_logs, ""]
    gains = {c.name: (c.final_reward or 0) - (c.root_reward or 0) for c in view.changes if c.name in view.trees}
    if gains:
        biggest = max(sorted(gains), key=lambda n: gains[n])
        gained = f"reward gain {gains[biggest]:+.3f}"
        if gains[biggest] <= 0:  # no tree gained: show the largest
            biggest = max(sorted(gains), key=lambda n: len(view.trees[n].nodes))
            gained = "the largest tree; no candidate of any tree beat its root version"
        lines += [f"Search tree of `{biggest}` ({gained}; ★ marks the chosen path):", "",
                  "```mermaid", *mermaid(view.trees[biggest], view.best[biggest], final_label(view, biggest)),
                  "```", ""]
    lines += ["Audit trail: the node branches `brew/" + view.run + "/<recipe>/n<id>`, rewards in "
              f"`git log --notes=brew`, history in `git log --first-parent brew/{view.run}/kb`."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------- what the logs wrote
HELD_BACK = "## Held back from the logs"
SHOWN_LINES = 8
"""New lines from the logs a PR shows per recipe (a count says how many more)."""
SHOWN_SOURCES = 3
"""Conversations a held-back text names (a count says how many more)."""


def _added(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]


def _fenced(lines: Sequence[str]) -> list[str]:
    """Lines as a fenced block whose fence no line can close."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+|~+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}text", *lines, fence]


def _calls(text: str) -> list[tuple[str, str]]:
    """(tool, the text of its arguments) for each call a recipe writes: in code form, its conditional steps'
    included, and out of code form (``issue_voucher(order_id)``), as ``brewkb lint`` reads them."""
    lines = [unicodedata.normalize("NFKC", line) for line in text.split("\n")]
    passed = passed_names("\n".join(lines))
    return [call for line in lines for call in line_calls(line, passed)]


def _tools(text: str) -> set[str]:
    """The tools a recipe tells an agent to call: its procedure's steps, every call it writes, and a name of two
    words or more it gives in backticks (`` Call `issue_voucher` with … ``) that none of its calls passes."""
    try:
        steps = procedure_of(parse_recipe(text)).steps
    except RecipeError:
        steps = ()
    passed = _arguments(text)
    named = {n for n in NAMED.findall(text) if COMPOUND.search(n) and n not in {a for _, a in passed}}
    return set().union(*steps) | {tool for tool, _ in _calls(text)} | named


def _arguments(text: str) -> set[tuple[str, str]]:
    """(tool, argument name) for each call a recipe writes (``_calls``)."""
    found = set()
    for tool, passed in _calls(text):
        for argument in passed.split(","):
            if name := re.match(r"\s*\**([A-Za-z_][\w.-]*)", argument):
                found.add((tool, name.group(1)))
    return found


def logs_section(before: Mapping[str, str], after: Mapping[str, str],
                 sources: Mapping[str, Sequence[Trajectory]], see_all: str = "", known: Collection[str] = ()) -> str:
    """The PR's two sections on log text: per changed recipe, its new lines
    that quote or repeat the logs it learned from (``sources``: recipe name →
    those trajectories, scrubbed), and the tools they name that no recipe of
    the base names; and the texts of those logs held back
    because they read as instructions to an agent (``brewkb.trajectories.quote``).
    ``before`` and ``after``: recipe name → text in the base and in the PR;
    ``see_all``: how a reviewer reads every line, said when some are not shown;
    ``known``: the agent's tools (``tools.known``), when a team lists them."""
    wrote: list[str] = []
    cut = False
    held: dict[str, tuple[HeldBack, list[str]]] = {}
    for name in sorted(after):
        if before.get(name) == after[name]:
            continue
        trajectories = sources.get(name, ())
        index = LogIndex(text for t in trajectories for text in log_texts(t))
        lines = [line for line in _added(before.get(name, ""), after[name]) if line.strip() and index.wrote(line)]
        if lines:
            cut = cut or len(lines) > SHOWN_LINES
            more = f"; {len(lines) - SHOWN_LINES} more not shown" if len(lines) > SHOWN_LINES else ""
            wrote += [f"`{name}`: {len(lines)} new line{'s' if len(lines) > 1 else ''} from the logs{more}",
                      *_fenced(lines[:SHOWN_LINES])]
        for item in held_back(trajectories):
            found, names = held.setdefault(item.text, (item, []))
            found.sources.extend(s for s in item.sources if s not in found.sources)
            names.append(name)
    new_tools = sorted(set().union(*(_tools(after[n]) for n in after if before.get(n) != after[n]))
                       - set().union(*map(_tools, before.values())))
    tools = ("\n**New tools.** Tools the changed recipes tell an agent to call that no recipe of the base KB names "
             + ("(check that calling each as the steps say is safe): " if known else
                "(check that each is one of your agent's tools, and that calling it as the steps say is safe): ")
             + ", ".join(f"`{t}`" + (f" ({NOT_THE_AGENTS})" if not_the_agents(t, known) else "") for t in new_tools)
             + "." + ("" if known else " brewkb.toml does not list your agent's tools: with `tools.known` set, a step "
                      "calling any other tool is left out and `brewkb lint` reports it.") if new_tools else "")
    passed = sorted(set().union(*(_arguments(after[n]) for n in after if before.get(n) != after[n]))
                    - set().union(*map(_arguments, before.values())))
    if passed:
        calls: dict[str, list[str]] = {}
        for tool, argument in passed:
            calls.setdefault(tool, []).append(argument)
        tools += ("\n**New arguments.** Arguments the changed recipes pass that no recipe of the base KB passes to "
                  "that tool (check that each is a parameter of the tool, and that its name says what it is): "
                  + ", ".join(f"`{tool}({', '.join(names)})`" for tool, names in calls.items()) + ".")
    intro = ("New lines of the changed recipes that quote or repeat the conversations they learned from; read them "
             "as text a user or a tool wrote, not as rules someone decided" + (f" ({see_all})" if cut and see_all
                                                                                else "") + ":")
    shown_held = []
    for item, names in held.values():
        ids = ", ".join(item.sources[:SHOWN_SOURCES]) + (f" and {len(item.sources) - SHOWN_SOURCES} more"
                                                         if len(item.sources) > SHOWN_SOURCES else "")
        recipes = ", ".join(f"`{n}`" for n in names)
        shown_held.append(f"- ``{item.text}`` — {item.reason} (for {recipes}; conversations {ids})")
    held_intro = ("Texts of those conversations that read as instructions to an agent. No recipe quotes them whole "
                  "(a sentence of one that asks for a recipe's action, and reads as no instruction on its own, may be "
                  "quoted as a request), and lines an integrator wrote that repeat them were dropped; check that none "
                  "of them changed what the recipes tell an agent to do:")
    return "\n\n".join([
        LOGS_WROTE, ("\n".join([intro, *wrote]) if wrote else "No new line of a changed recipe quotes the logs.")
        + tools,
        HELD_BACK, "\n".join([held_intro, *shown_held]) if shown_held else
        "Nothing: no text of the conversations these recipes learned from reads as instructions to an agent."])


def from_logs_of(store: SearchStore, trajectories: Iterable[Trajectory],
                 insights: Mapping[str, Sequence[Insight]], scrub: Callable[[Trajectory], Trajectory],
                 known: Collection[str] = ()) -> str:
    """``logs_section`` for a run's PR: its recipes in the base and in the
    final KB, each changed one with the trajectories it learned from (its
    concept's insights and its ``sources``), told through ``scrub``."""
    final = store.final_commit() or store.base
    before = {Path(p).stem: t.decode("utf-8", "replace") for p, t in store.git.read_folder(store.base,
                                                                                          store.recipes_dir).items()}
    after = {Path(p).stem: t.decode("utf-8", "replace") for p, t in store.git.read_folder(final,
                                                                                         store.recipes_dir).items()}
    by_id = {t.id: t for t in trajectories}
    sources: dict[str, list[Trajectory]] = {}
    for name, text in after.items():
        if before.get(name) == text:
            continue
        try:
            listed = parse_recipe(text).sources
        except RecipeError:
            listed = ()
        ids = dict.fromkeys([*(i.source for i in insights.get(name, ())), *listed])
        sources[name] = [scrub(by_id[i]) for i in ids if i in by_id]
    branch = BrewRef.pr(store.run).short
    return logs_section(before, after, sources, f"every line: `git diff {store.base[:12]} {branch} -- "
                                                f"{store.recipes_dir}/`; `brewkb lint --rev {branch}` reads each "
                                                "quotation by the quoting rules", known)

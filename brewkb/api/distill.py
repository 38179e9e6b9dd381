"""``distill``: recipes from logged trajectories, with no environment to re-run
them — grades from the logs, reflection on scrubbed trajectories, concepts,
integration, then a retrieval-only search ending with a ``brew/RUN/pr`` branch."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from brewkb.api.logeval import LOG_EVAL_FILE
from brewkb.api.loop import run_command
from brewkb.errors import NotBetterError, RunError
from brewkb.events import EventSink, null_sink
from brewkb.fsutil import write_atomic
from brewkb.kb import KB
from brewkb.recipes import parse_recipe
from brewkb.retrieval.compare import LogEvaluation, too_few
from brewkb.retrieval.logeval import Case, cases_of, compare_arms
from brewkb.retrieval.ranking import Retriever, retriever_of
from brewkb.run.folder import FILES, Run
from brewkb.run.pipeline import Pipeline
from brewkb.run.record import left_out, logs_table
from brewkb.search.distill import LogExpander, RetrievalEvaluator
from brewkb.search.engine import SearchResult, SearchSpec, note_of, search
from brewkb.search.episodes import EpisodeCache
from brewkb.search.final import FinalChoice, finalize
from brewkb.search.store import SearchStore
from brewkb.stages.concepts import Concept
from brewkb.trajectories.schema import Trajectory
from brewkb.trajectories.scrub import Scrubber, scrubber_of
from brewkb.trajectories.split import HOLD_OUT_EVERY, split_tasks
from brewkb.trajectories.tools import user_turns

__all__ = ["DistillResult", "distill", "adistill"]

BASE, NEW = "base KB", "new KB"

def _hold_out(folder: Run) -> tuple[set[str], set[str]]:
    """Write the eval part of the logs as the run's eval rollouts and record
    the test part, once (see ``brewkb.trajectories.split``). A trajectory in
    both files is reflected as eval only, so it maps tasks to concepts without
    giving insights; the test tasks enter no stage."""
    if folder.stage_done("rollouts-eval"):
        record = folder.manifest()["stages"]["rollouts-eval"]
        return set(record.get("held_out", [])), set(record.get("test", []))
    logged = folder.read_trajectories(FILES["rollouts"])
    held, test = split_tasks([t.task_id for t in logged])
    folder.write_trajectories(FILES["rollouts-eval"], [t.with_(split="eval") for t in logged if t.task_id in held])
    folder.record_stage("rollouts-eval", source="held out from the logs", held_out=sorted(held), test=sorted(test),
                        episodes=sum(t.task_id in held for t in logged))
    return held, test


def _queries(trajectories: list[Trajectory], scrub: Any) -> dict[str, str]:
    """Task id → the request as its users wrote it (all user turns), scrubbed."""
    out: dict[str, str] = {}
    for t in trajectories:
        if t.task_id not in out:
            clean = scrub.trajectory(t)
            out[t.task_id] = " ".join(user_turns(clean)) or clean.task
    return out


def pr_message(run: str, source: str, spec: SearchSpec, result: SearchResult, choices: dict[str, FinalChoice],
               concepts: list[Concept], split: tuple[set[str], set[str]], logged: list[Trajectory],
               grades: dict[str, Any], backend: str, comparison: LogEvaluation | None, missing: str = "") -> str:
    """The PR body: what was measured, and what could not be."""
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
            + "## What could not be measured\n\n"
            "- Task success with the recipes: no environment can re-run these tasks, so λ_corr = 0 and no "
            "recipe's effect on success is known. Evaluate on a live environment before relying on it.\n"
            "- Hindsight relabelling: it needs an environment to re-run relabelled tasks; skipped.\n"
            + ("\n## Concepts merged\n\n" + "\n".join(merges) + "\n" if merges else "")
            + (f"\n{missing}\n" if missing else "")
            + f"\nAudit trail: `git log --notes=brew --first-parent brew/{run}/kb`, `brewkb tree {run}`.\n\n"
            f"Brew-Run: {run}\n")


def comparison_section(comparison: LogEvaluation | None) -> str:
    """The new KB beside the base KB and the baselines on the test split:
    the verdict, then the tables (``logs_table``)."""
    if comparison is None:
        return ("## Compared with the baselines\n\nNot measured: the logs have fewer than "
                f"{HOLD_OUT_EVERY} tasks, so none was held out for a test.\n\n")
    return "## Compared with the baselines (test split)\n\n" + "\n".join(logs_table(comparison.to_json())) + "\n\n"


@dataclasses.dataclass(frozen=True)
class DistillResult:
    run: str
    kb_commit: str | None
    pr_commit: str
    concepts: dict[str, dict[str, Any]]
    merged: dict[str, list[str]]
    held_out: int
    nodes: int
    comparison: dict[str, Any] | None = None
    """The test split's comparison with the baselines (``LogEvaluation.to_json``)."""
    shortfalls: list[str] = dataclasses.field(default_factory=list)
    """The baselines, and the base KB, the new KB does not beat, in words."""
    verdict: str = ""
    """Whether the new KB beats each baseline, as the PR says it."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def distill(run: str, *, strategy: str | None = None, iterations: int | None = None, width: int | None = None,
            depth: int | None = None, no_cache: bool = False, require_better: bool = False,
            events: EventSink = null_sink, start: Path = Path(".")) -> DistillResult:
    """Distil RUN's logged trajectories into recipes; ends with ``brew/RUN/pr``.
    ``require_better``: raise ``NotBetterError`` (after the PR branch is
    written) when the new KB does not beat every baseline and the base KB on the test split."""
    return run_command(adistill(run, strategy=strategy, iterations=iterations, width=width, depth=depth,
                                no_cache=no_cache, require_better=require_better, events=events, start=start))


async def adistill(run: str, *, strategy: str | None = None, iterations: int | None = None,
                   width: int | None = None, depth: int | None = None, no_cache: bool = False,
                   require_better: bool = False, events: EventSink = null_sink,
                   start: Path = Path(".")) -> DistillResult:
    """``distill`` on the caller's event loop."""
    with KB.open(start, require_config=True) as kb:
        folder = Run.at(kb.runs_dir, run)
        with folder.lock("distill"):
            result = await _distill(kb, folder, strategy, iterations, width, depth, no_cache, events)
    if require_better and (result.comparison is None or result.shortfalls):
        if result.comparison is None:
            why = f"was not compared: its logs have fewer than {HOLD_OUT_EVERY} tasks"
        elif result.shortfalls == [too_few(result.comparison["cases"])]:
            why = f"cannot be shown at least as good as the baselines: {result.shortfalls[0]} on the test split"
        else:
            why = f"is behind {'; '.join(result.shortfalls)} on the test split"
        raise NotBetterError(f"the distilled KB of run {run} {why}; brew/{run}/pr is written, review it with "
                             f"`brewkb pr {run} --body-only`")
    return result


def _same_search(run: str, recorded: dict[str, Any], **given: Any) -> None:
    """Refuse search options that differ from those run ``run`` searched with:
    its search keeps them, so they would change nothing."""
    changed = {k: v for k, v in given.items() if v is not None and recorded.get(k) != v}
    if changed:
        asked = " ".join(f"--{k} {v}" for k, v in changed.items())
        kept = " ".join(f"--{k} {recorded.get(k)}" for k in changed)
        raise RunError(f"run {run} was distilled with {kept}, and its search keeps them; {asked} would change "
                       f"nothing: run `brewkb distill {run}` without them, or import the logs into a new run "
                       "(`brewkb import FILE --format F --run NEW`) and distil that with them")


async def _distill(kb: KB, folder: Run, strategy: str | None, iterations: int | None, width: int | None,
                   depth: int | None, no_cache: bool, events: EventSink) -> DistillResult:
    run = folder.id
    logged = folder.read_trajectories(FILES["rollouts"])
    if not logged:
        raise RunError(f"run {run} has no trajectories; bring logs in with "
                       f"`brewkb import FILE --format F --run {run}` first")
    source = folder.imported_from() or "recorded"
    recorded = folder.manifest().get("search_spec")
    if recorded is not None and recorded.get("kind") != "distill":
        raise RunError(f"run {run} is a refine run: its search re-ran tasks in the environment and its PR is "
                       f"brew/{run}/pr; continue it with `brewkb refine --resume {run}`, or distill logs imported "
                       "into a run of their own")
    if recorded is not None:
        _same_search(run, recorded["spec"], strategy=strategy, iterations=iterations, width=width, depth=depth)
    spec = SearchSpec.from_record(recorded["spec"]) if recorded else SearchSpec.from_config(
        kb.config.search, strategy=strategy, iterations=iterations, width=width, depth=depth, lambda_corr=0.0,
        lambda_ret=1.0)
    base = recorded["base"] if recorded else kb.store.head_commit()
    if not recorded:
        folder.set_manifest("search_spec", {"base": base, "spec": dataclasses.asdict(spec), "kind": "distill"})
    kb.config = dataclasses.replace(kb.config, stages=dataclasses.replace(kb.config.stages, relabel=False))
    async with Pipeline.open(kb, folder, no_cache=no_cache, events=events) as pipeline:
        await pipeline.outcomes()  # the judge labels unknown outcomes first, held-out ones included
        logged = folder.read_trajectories(FILES["rollouts"])
        split = _hold_out(folder)
        grades = await pipeline.grades()
        await pipeline.relabel()
        train, _ = await pipeline.reflections()
        concepts = await pipeline.concepts()
        roots = {r.name: r for r in await pipeline.integrate()}
        concepts = [c for c in concepts if c.slug in roots]
        if not concepts:
            raise RunError(f"run {run} found no concept to distil (see runs/{run}/manifest.json); "
                           "more or more varied trajectories are needed")
        slug_of = _mapping(folder)
        insights: dict[str, list[Any]] = defaultdict(list)
        for insight in train:
            if slug_of.get(insight.concept) in roots:
                insights[slug_of[insight.concept]].append(insight)
        expander = LogExpander(backend=pipeline.backend, insights=insights,
                               titles={c.slug: (c.title, c.aliases) for c in concepts},
                               retries=kb.config.stages.integrate_retries)
        scrub = scrubber_of(kb.config.scrub)
        retriever = retriever_of(kb, pipeline.client)
        cases: dict[str, list[Case]] = defaultdict(list)
        for case in cases_of([t for t in logged if t.task_id in split[0]], scrub.trajectory):
            cases[case.task_id].append(case)
        evaluator = RetrievalEvaluator(queries=_queries(logged, scrub), cases=cases,
                                       q_eval={c.slug: c.q_eval for c in concepts},
                                       q_train={c.slug: c.q_train for c in concepts},
                                       retriever=retriever, cache=EpisodeCache(0), k=kb.config.retrieval.k)
        store = SearchStore(kb.store, run, base, kb.recipes_prefix())
        result = await search(spec, store, expander, evaluator, {c.slug: roots[c.slug] for c in concepts},
                              events)
        choices = await finalize(store, evaluator, result.trees, candidates=kb.config.search.final_candidates,
                                 min_gain=kb.config.search.min_gain,
                                 lambdas=(spec.lambda_corr, spec.lambda_ret), iteration=spec.rounds + 1)
        # the KB the PR holds: the final gather, whether this process or an interrupted one wrote it
        result = dataclasses.replace(result, kb_commit=store.final_commit() or result.kb_commit)
        comparison = _compare(kb, store, logged, split, retriever, scrub) if split[1] else None
    pr = store.write_pr(pr_message(run, source, spec, result, choices, concepts, split, logged, grades,
                                   kb.config.llm.backend, comparison, left_out(folder.manifest().get("stages", {}))),
                        spec.rounds)
    nodes = sum(len(t.nodes) for t in result.trees.values())
    folder.record_stage("search", nodes=nodes, kb=result.kb_commit, pr=pr, reward="retrieval only")
    if comparison is not None:
        write_atomic(folder.file(LOG_EVAL_FILE), json.dumps(comparison.to_json(), indent=2) + "\n")
    return DistillResult(run, result.kb_commit, pr, {c: {**note_of(result, c), "final": choices[c].to_json()}
                                                     for c in sorted(result.trees)},
                         {c.slug: list(c.merged) for c in concepts if c.merged}, len(split[0]), nodes,
                         comparison.to_json() if comparison else None,
                         comparison.shortfalls(NEW) if comparison else [],
                         comparison.verdict(NEW) if comparison else "")


def _compare(kb: KB, store: SearchStore, logged: list[Trajectory], split: tuple[set[str], set[str]],
             retriever: Retriever, scrub: Scrubber) -> LogEvaluation:
    """The final KB, the base KB and every baseline on the test split; the
    baselines remember what the KB learned from (``all-trajectories`` every
    conversation that is not a test one)."""
    held, test = split
    final = store.final_commit()
    kbs = {BASE: [parse_recipe(t.decode()) for t in store.git.read_folder(store.base, store.recipes_dir).values()],
           NEW: [parse_recipe(t.decode()) for t in store.git.read_folder(final or store.base, store.recipes_dir).values()]}
    tested = [t for t in logged if t.task_id in test]
    learned = [t for t in logged if t.task_id not in held | test]
    cases = cases_of(tested, scrub.trajectory, learned)
    arms = compare_arms(kbs, learned, cases, retriever, scrub.trajectory,
                        everything=[t for t in logged if t.task_id not in test])
    return LogEvaluation(store.run, store.run, len(tested), cases, arms)


def _mapping(folder: Run) -> dict[str, str]:
    return dict(json.loads(folder.file(FILES["concepts"]).read_text(encoding="utf-8"))["mapping"])

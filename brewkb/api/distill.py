"""``distill``: recipes from logged trajectories, with no environment to re-run
them — grades from the logs, reflection on scrubbed trajectories, concepts,
integration, then a retrieval-only search ending with a ``brew/RUN/pr`` branch."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from brewkb.api.loop import run_command
from brewkb.errors import RunError
from brewkb.events import EventSink, null_sink
from brewkb.kb import KB
from brewkb.llm.offline import user_turns
from brewkb.retrieval.ranking import retriever_of
from brewkb.run.folder import FILES, Run
from brewkb.run.pipeline import Pipeline
from brewkb.search.distill import LogExpander, RetrievalEvaluator
from brewkb.search.engine import SearchResult, SearchSpec, note_of, search
from brewkb.search.episodes import EpisodeCache
from brewkb.search.final import FinalChoice, finalize
from brewkb.search.store import SearchStore
from brewkb.stages.concepts import Concept
from brewkb.trajectories.schema import Trajectory, content_id
from brewkb.trajectories.scrub import scrubber_of

__all__ = ["DistillResult", "distill", "adistill", "held_out_tasks", "imported_source", "HOLD_OUT_EVERY"]

HOLD_OUT_EVERY = 5
"""One logged task in this many is held out to measure retrieval (at least 5 tasks are needed)."""


def imported_source(run: Run) -> str | None:
    """``tau-bench``, ``openai`` ... when the run's trajectories were imported from logs."""
    source = str(run.manifest().get("stages", {}).get("rollouts", {}).get("source", ""))
    return source.split(":", 1)[1] if source.startswith("import:") else None


def held_out_tasks(task_ids: list[str]) -> set[str]:
    """A stable choice of one task in ``HOLD_OUT_EVERY`` (by content hash, so
    adding logs of other tasks does not move a task across the split)."""
    distinct = sorted(set(task_ids), key=lambda t: (content_id(["held-out", t]), t))
    if len(distinct) < HOLD_OUT_EVERY:
        return set()
    return set(distinct[:: HOLD_OUT_EVERY])


def _hold_out(folder: Run) -> set[str]:
    """Write the held-out part of the logs as the run's eval rollouts (once).
    A trajectory in both files is reflected as eval only, so it maps tasks to
    concepts without giving insights."""
    if folder.stage_done("rollouts-eval"):
        return set(folder.manifest()["stages"]["rollouts-eval"].get("held_out", []))
    logged = folder.read_trajectories(FILES["rollouts"])
    held = held_out_tasks([t.task_id for t in logged])
    folder.write_trajectories(FILES["rollouts-eval"], [t.with_(split="eval") for t in logged if t.task_id in held])
    folder.record_stage("rollouts-eval", source="held out from the logs", held_out=sorted(held),
                        episodes=sum(t.task_id in held for t in logged))
    return held


def _queries(trajectories: list[Trajectory], scrub: Any) -> dict[str, str]:
    """Task id → the request as its users wrote it (all user turns), scrubbed."""
    out: dict[str, str] = {}
    for t in trajectories:
        if t.task_id not in out:
            clean = scrub.trajectory(t)
            out[t.task_id] = " ".join(user_turns(clean)) or clean.task
    return out


def pr_message(run: str, source: str, spec: SearchSpec, result: SearchResult, choices: dict[str, FinalChoice],
               concepts: list[Concept], held: set[str], logged: list[Trajectory], grades: dict[str, Any],
               backend: str) -> str:
    """The PR body: what was measured, and what could not be."""
    rows = ["| recipe | held-out requests | root MRR | base MRR (final) | chosen MRR (final) | chosen | nodes tried |",
            "|---|---:|---:|---:|---:|---|---:|"]
    by_slug = {c.slug: c for c in concepts}
    for concept in sorted(result.trees):
        info = note_of(result, concept)
        root = "–" if info["root_reward"] is None else f"{info['root_reward']:.3f}"
        held_n = len(by_slug[concept].q_eval) if concept in by_slug else 0
        final = choices[concept]
        chosen = f"base {final.base} kept" if final.kept else f"n{final.node}"
        rows.append(f"| `{concept}` | {held_n or 'none (train requests)'} | {root} | {final.base_reward:.3f} | "
                    f"{final.reward:.3f} | {chosen} | {info['nodes']} |")
    merges = [f"- `{c.slug}`: {note}" for c in concepts for note in c.merged]
    rewarded = sum(t.outcome.score is not None for t in logged)
    judged = sum(1 for v in grades.values() if isinstance(v, dict) and "failed" not in v)
    return (f"brew({run}): {len(result.trees)} recipes distilled from logged trajectories\n\n"
            f"Source: {len(logged)} trajectories imported from {source} logs; {len(held)} of their tasks held out "
            f"to measure retrieval. Personal data was replaced by placeholders before reflection.\n\n"
            "## What was measured\n\n"
            f"- Retrieval only: reward = MRR of each recipe among the KB for the held-out logged requests of its "
            f"concept (λ_corr = {spec.lambda_corr}, λ_ret = {spec.lambda_ret}); {spec.strategy}, {spec.rounds} "
            "rounds.\n"
            f"- Grades taken from the logs: {rewarded} of {len(logged)} trajectories carry a reward; "
            f"{judged} were scored by the rubric judge ({backend}: "
            + ("only the rubrics it can count" if backend == "offline" else "an LLM") + ").\n\n" + "\n".join(rows) + "\n\n"
            "## What could not be measured\n\n"
            "- Task success with the recipes: no environment can re-run these tasks, so λ_corr = 0 and no "
            "recipe's effect on success is known. Evaluate on a live environment before relying on it.\n"
            "- Hindsight relabelling: it needs an environment to re-run relabelled tasks; skipped.\n"
            + ("\n## Concepts merged\n\n" + "\n".join(merges) + "\n" if merges else "")
            + f"\nAudit trail: `git log --notes=brew --first-parent brew/{run}/kb`, `brewkb tree {run}`.\n\n"
            f"Brew-Run: {run}\n")


@dataclasses.dataclass(frozen=True)
class DistillResult:
    run: str
    kb_commit: str | None
    pr_commit: str
    concepts: dict[str, dict[str, Any]]
    merged: dict[str, list[str]]
    held_out: int
    nodes: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def distill(run: str, *, strategy: str | None = None, iterations: int | None = None, width: int | None = None,
            depth: int | None = None, no_cache: bool = False, events: EventSink = null_sink,
            start: Path = Path(".")) -> DistillResult:
    """Distil RUN's logged trajectories into recipes; ends with ``brew/RUN/pr``."""
    return run_command(adistill(run, strategy=strategy, iterations=iterations, width=width, depth=depth,
                                no_cache=no_cache, events=events, start=start))


async def adistill(run: str, *, strategy: str | None = None, iterations: int | None = None,
                   width: int | None = None, depth: int | None = None, no_cache: bool = False,
                   events: EventSink = null_sink, start: Path = Path(".")) -> DistillResult:
    """``distill`` on the caller's event loop."""
    with KB.open(start, require_config=True) as kb:
        folder = Run.at(kb.runs_dir, run)
        with folder.lock("distill"):
            return await _distill(kb, folder, strategy, iterations, width, depth, no_cache, events)


async def _distill(kb: KB, folder: Run, strategy: str | None, iterations: int | None, width: int | None,
                   depth: int | None, no_cache: bool, events: EventSink) -> DistillResult:
    run = folder.id
    logged = folder.read_trajectories(FILES["rollouts"])
    if not logged:
        raise RunError(f"run {run} has no trajectories; bring logs in with "
                       f"`brewkb import FILE --format F --run {run}` first")
    source = imported_source(folder) or "recorded"
    recorded = folder.manifest().get("search_spec")
    if recorded is not None and recorded.get("kind") != "distill":
        raise RunError(f"run {run} is a refine run: its search re-ran tasks in the environment and its PR is "
                       f"brew/{run}/pr; continue it with `brewkb refine --resume {run}`, or distill logs imported "
                       "into a run of their own")
    spec = SearchSpec.from_record(recorded["spec"]) if recorded else SearchSpec.from_config(
        kb.config.search, strategy=strategy, iterations=iterations, width=width, depth=depth, lambda_corr=0.0,
        lambda_ret=1.0)
    base = recorded["base"] if recorded else kb.store.head_commit()
    if not recorded:
        folder.set_manifest("search_spec", {"base": base, "spec": dataclasses.asdict(spec), "kind": "distill"})
    held = _hold_out(folder)
    kb.config = dataclasses.replace(kb.config, stages=dataclasses.replace(kb.config.stages, relabel=False))
    async with Pipeline.open(kb, folder, no_cache=no_cache, events=events) as pipeline:
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
        evaluator = RetrievalEvaluator(queries=_queries(logged, scrubber_of(kb.config.scrub)),
                                       q_eval={c.slug: c.q_eval for c in concepts},
                                       q_train={c.slug: c.q_train for c in concepts},
                                       retriever=retriever_of(kb, pipeline.client), cache=EpisodeCache(0))
        store = SearchStore(kb.store, run, base, kb.recipes_prefix())
        result = await search(spec, store, expander, evaluator, {c.slug: roots[c.slug] for c in concepts},
                              events)
        choices = await finalize(store, evaluator, result.trees, candidates=kb.config.search.final_candidates,
                                 min_gain=kb.config.search.min_gain,
                                 lambdas=(spec.lambda_corr, spec.lambda_ret), iteration=spec.rounds + 1)
        # the KB the PR holds: the final gather, whether this process or an interrupted one wrote it
        result = dataclasses.replace(result, kb_commit=store.final_commit() or result.kb_commit)
    pr = store.write_pr(pr_message(run, source, spec, result, choices, concepts, held, logged, grades,
                                      kb.config.llm.backend), spec.rounds)
    nodes = sum(len(t.nodes) for t in result.trees.values())
    folder.record_stage("search", nodes=nodes, kb=result.kb_commit, pr=pr, reward="retrieval only")
    return DistillResult(run, result.kb_commit, pr, {c: {**note_of(result, c), "final": choices[c].to_json()}
                                                     for c in sorted(result.trees)},
                         {c.slug: list(c.merged) for c in concepts if c.merged}, len(held), nodes)


def _mapping(folder: Run) -> dict[str, str]:
    return dict(json.loads(folder.file(FILES["concepts"]).read_text(encoding="utf-8"))["mapping"])

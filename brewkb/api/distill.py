"""``distill``: recipes from logged trajectories, with no environment to re-run
them — grades from the logs, reflection on scrubbed trajectories, concepts,
integration, then a retrieval-only search ending with a ``brew/RUN/pr`` branch."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from brewkb.api.logeval import LOG_EVAL_FILE
from brewkb.api.loop import run_command
from brewkb.api.trajectories import import_recordings
from brewkb.config import Config
from brewkb.errors import NotBetterError, RecipeError, RunError
from brewkb.events import EventSink, null_sink
from brewkb.fsutil import write_atomic
from brewkb.kb import KB
from brewkb.recipes import Recipe, parse_recipe
from brewkb.retrieval.compare import LogEvaluation, too_few
from brewkb.retrieval.logeval import Case, cases_of, compare_arms
from brewkb.retrieval.ranking import Retriever, retriever_of
from brewkb.run.folder import FILES, Run
from brewkb.run.pipeline import Pipeline
from brewkb.run.prbody import BASE, NEW, comparison_section, distill_message, from_logs_of
from brewkb.run.record import left_out
from brewkb.search.distill import LogExpander, RetrievalEvaluator
from brewkb.search.engine import SearchSpec, note_of, search
from brewkb.search.episodes import EpisodeCache
from brewkb.search.final import finalize
from brewkb.search.store import SearchStore
from brewkb.stages.concepts import actions_of, evidence, held_out
from brewkb.trajectories.schema import Trajectory
from brewkb.trajectories.scrub import Scrubber, scrubber_of
from brewkb.trajectories.split import HOLD_OUT_EVERY
from brewkb.trajectories.tools import user_turns

__all__ = ["DistillResult", "distill", "adistill", "comparison_section"]

log = logging.getLogger(__name__)

WAITING = ("learned from {tasks} task(s), but no held-out (eval) request asked for it, so nothing can show that "
           "it helps (a recipe is never scored on the requests it was learned from); it waits, neither added nor "
           "changed, until logs whose held-out part asks for it are distilled")

def _hold_out(folder: Run, config: Config) -> tuple[set[str], set[str]]:
    """Write the eval part of the logs as the run's eval rollouts and record
    the test part, once (see ``brewkb.trajectories.split``). A trajectory in
    both files is reflected as eval only, so it maps tasks to concepts without
    giving insights; the test tasks enter no stage."""
    if folder.stage_done("rollouts-eval"):
        record = folder.manifest()["stages"]["rollouts-eval"]
        return set(record.get("held_out", [])), set(record.get("test", []))
    logged = folder.read_trajectories(FILES["rollouts"])
    held, test = held_out(logged, config.stages.min_concept_tasks, config.tools.signatures)
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
    waiting: dict[str, str] = dataclasses.field(default_factory=dict)
    """Concepts not searched nor added, by why: no held-out request asked for them (see ``WAITING``)."""
    nothing: str = ""
    """Why the run learned nothing and wrote no PR branch (empty when it wrote one)."""

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
    if require_better and result.nothing:
        raise NotBetterError(f"run {run} learned nothing, so nothing shows a better KB: {result.nothing}")
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
    import_recordings(folder, kb.config.scrub, events)  # a serve run: the conversations recorded so far
    logged = folder.read_trajectories(FILES["rollouts"])
    if not logged:
        raise RunError(f"run {run} has no trajectories; bring logs in with "
                       f"`brewkb import FILE --format F --run {run}` first")
    # the formats its conversations came in (a run may take files of several); the last import's, for older ones
    source = ", ".join(sorted({str(t.meta["source"]) for t in logged if t.meta.get("source")})) or \
        folder.imported_from() or "recorded"
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
    kb.recipes(base[:12])  # a base recipe no reader takes is named now (and skipped in the comparison), not at the end
    if not recorded:
        for line in kb.uncommitted():
            log.warning(line)
        folder.set_manifest("search_spec", {"base": base, "spec": dataclasses.asdict(spec), "kind": "distill"})
    kb.config = dataclasses.replace(kb.config, stages=dataclasses.replace(kb.config.stages, relabel=False))
    async with Pipeline.open(kb, folder, no_cache=no_cache, events=events) as pipeline:
        await pipeline.outcomes()  # the judge labels unknown outcomes first, held-out ones included
        logged = folder.read_trajectories(FILES["rollouts"])
        split = _hold_out(folder, kb.config)
        grades = await pipeline.grades()
        await pipeline.relabel()
        train, _ = await pipeline.reflections()
        concepts = await pipeline.concepts()
        roots = {r.name: r for r in await pipeline.integrate()}
        concepts = [c for c in concepts if c.slug in roots]
        waiting = {c.slug: WAITING.format(tasks=len(c.q_train)) for c in concepts if not c.q_eval}
        concepts = [c for c in concepts if c.slug not in waiting]
        if not concepts:
            learned = [t for t in logged if t.task_id not in split[0] | split[1]]
            nothing = _nothing(run, learned, waiting, kb.config.stages.min_concept_tasks, split[0])
            folder.record_stage("search", nodes=0, nothing=nothing, waiting=waiting)
            return DistillResult(run, None, "", {}, {}, len(split[0]), 0, waiting=waiting, nothing=nothing)
        slug_of = _mapping(folder)
        searched = {c.slug for c in concepts}
        insights = {slug: evidence([i for i in train if slug_of.get(i.concept) == slug], slug_of, searched, train)
                    for slug in roots}
        expander = LogExpander(backend=pipeline.backend, insights=insights,
                               titles={c.slug: (c.title, c.aliases) for c in concepts},
                               retries=kb.config.stages.integrate_retries, known=kb.config.tools.signatures,
                               supported=pipeline.supported_calls, logs=pipeline.log_texts)
        scrub = scrubber_of(kb.config.scrub)
        retriever = retriever_of(kb, pipeline.client)
        cases: dict[str, list[Case]] = defaultdict(list)
        for case in cases_of([t for t in logged if t.task_id in split[0]], scrub.trajectory,
                             known=kb.config.tools.signatures):
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
                                 lambdas=(spec.lambda_corr, spec.lambda_ret), iteration=spec.rounds + 1,
                                 max_bytes=kb.config.kb.max_recipe_kb * 1024)
        # the KB the PR holds: the final gather, whether this process or an interrupted one wrote it
        result = dataclasses.replace(result, kb_commit=store.final_commit() or result.kb_commit)
        comparison = _compare(kb, store, logged, split, retriever, scrub) if split[1] else None
        from_logs = from_logs_of(store, logged, insights, scrub.trajectory, kb.config.tools.signatures)
    pr = store.write_pr(distill_message(run, source, spec, result, choices, concepts, split, logged, grades,
                                        kb.config.llm.backend, comparison, left_out(folder.manifest().get("stages", {})),
                                        from_logs, waiting, _dropped(folder)), spec.rounds)
    nodes = sum(len(t.nodes) for t in result.trees.values())
    folder.record_stage("search", nodes=nodes, kb=result.kb_commit, pr=pr, reward="retrieval only", waiting=waiting)
    if comparison is not None:
        write_atomic(folder.file(LOG_EVAL_FILE), json.dumps(comparison.to_json(), indent=2) + "\n")
    return DistillResult(run, result.kb_commit, pr, {c: {**note_of(result, c), "final": choices[c].to_json()}
                                                     for c in sorted(result.trees)},
                         {c.slug: list(c.merged) for c in concepts if c.merged}, len(split[0]), nodes,
                         comparison.to_json() if comparison else None,
                         comparison.shortfalls(NEW) if comparison else [],
                         comparison.verdict(NEW) if comparison else "", waiting)


def _nothing(run: str, learned: list[Trajectory], waiting: dict[str, str], min_tasks: int,
             held: set[str]) -> str:
    """Why a run learned nothing, in one sentence."""
    if waiting and not held:
        return (f"its logs hold fewer than {HOLD_OUT_EVERY} tasks, so none was held out to measure a recipe on, and "
                f"a recipe is never scored on the requests it was learned from; {len(waiting)} concept(s) wait "
                f"({', '.join(sorted(waiting))}): distil logs of {HOLD_OUT_EVERY} tasks or more")
    if waiting:
        return (f"{len(waiting)} concept(s) wait for evidence ({', '.join(sorted(waiting))}): no held-out (eval) "
                "request asked for them, and a recipe is never scored on the requests it was learned from")
    if not any(actions_of(learned).values()):
        return ("its learning conversations made no write and no hand-off (they only read or talked): there is no "
                "procedure to learn")
    if learned and all(t.success is False for t in learned):
        return (f"none of its {len(learned)} learning conversations passed (the logs' grades say every one failed): "
                "a recipe is learned from conversations that passed, or whose outcome is unknown")
    return (f"no action was done by conversations that passed in {min_tasks} distinct tasks or more "
            f"(stages.min_concept_tasks); runs/{run}/concepts.json says what was dropped and why")


def _compare(kb: KB, store: SearchStore, logged: list[Trajectory], split: tuple[set[str], set[str]],
             retriever: Retriever, scrub: Scrubber) -> LogEvaluation:
    """The final KB, the base KB and every baseline on the test split; the
    baselines remember what the KB learned from (``all-trajectories`` every
    conversation that is not a test one)."""
    held, test = split
    final = store.final_commit()
    kbs = {BASE: _readable(store, store.base), NEW: _readable(store, final or store.base)}
    tested = [t for t in logged if t.task_id in test]
    learned = [t for t in logged if t.task_id not in held | test]
    cases = cases_of(tested, scrub.trajectory, learned, kb.config.tools.signatures)
    arms = compare_arms(kbs, learned, cases, retriever, scrub.trajectory,
                        everything=[t for t in logged if t.task_id not in test])
    return LogEvaluation(store.run, store.run, len(tested), cases, arms)


def _readable(store: SearchStore, commit: str) -> list[Recipe]:
    """The recipes of ``commit`` that parse; the others were named when the run started (``KB.recipes``)."""
    found = []
    for text in store.git.read_folder(commit, store.recipes_dir).values():
        try:
            found.append(parse_recipe(text.decode("utf-8")))
        except (RecipeError, UnicodeDecodeError):
            continue
    return found


def _dropped(folder: Run) -> list[str]:
    """The concepts stage's notes on what became no concept (merges left out)."""
    notes = json.loads(folder.file(FILES["concepts"]).read_text(encoding="utf-8")).get("dropped", [])
    return [note for note in notes if " dropped: " in note]


def _mapping(folder: Run) -> dict[str, str]:
    return dict(json.loads(folder.file(FILES["concepts"]).read_text(encoding="utf-8"))["mapping"])

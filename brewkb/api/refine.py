"""``refine``: the whole method, stages then search, ending with a PR branch;
``tree`` and ``gc`` for what a run leaves in git."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.api.evaluate import evaluate_arms
from brewkb.api.loop import run_command
from brewkb.api.plan import limits_of, open_budget
from brewkb.errors import AllFailedError, BudgetExhausted, DiskFullError, RunError
from brewkb.events import Event, EventSink, null_sink
from brewkb.fsutil import is_disk_full, write_atomic
from brewkb.git.refs import BrewRef
from brewkb.kb import KB
from brewkb.llm.ledger import Ledger, LedgerEntry, read_ledger, summarise
from brewkb.retrieval.ranking import retriever_of
from brewkb.run.budget import Limits
from brewkb.run.folder import BUDGET_SPENT, FILES, Journal, Run, new_run_id
from brewkb.run.lookup import require_run
from brewkb.run.pipeline import Pipeline
from brewkb.run.prbody import from_logs_of, refine_message
from brewkb.run.record import EVAL_FILE, effects_table, eval_table, left_out
from brewkb.search.engine import SearchResult, SearchSpec, note_of, rebuild, search
from brewkb.search.episodes import EpisodeCache
from brewkb.search.evaluate import Evaluator
from brewkb.search.expand import Expander
from brewkb.search.final import FinalChoice, chosen_nodes, finalize, recorded_choices
from brewkb.search.store import SearchStore, find_base
from brewkb.search.tree import Tree
from brewkb.trajectories.scrub import scrubber_of

__all__ = ["RefineResult", "refine", "arefine", "load_trees", "gc"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefineResult:
    run: str
    kb_commit: str | None
    pr_commit: str
    concepts: dict[str, dict[str, Any]]
    nodes: int
    episodes_run: int
    episodes_reused: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def refine(*, run: str | None = None, resume: str | None = None, base: str | None = None,
           strategy: str | None = None, iterations: int | None = None, width: int | None = None,
           depth: int | None = None, relabel: bool | None = None, no_cache: bool = False, no_eval: bool = False,
           limits: Limits = Limits(), events: EventSink = null_sink, start: Path = Path(".")) -> RefineResult:
    """Run the stages and the search, then (unless ``no_eval``) evaluate the
    new KB, the base KB and no KB on the test split for the PR; ``resume``
    continues a run from its files and git.

    ``limits`` (kept with the run, so a plain resume keeps them) stop the run
    with ``BudgetExhausted`` before it spends more (see ``brewkb.run.budget``)."""
    return run_command(arefine(run=run, resume=resume, base=base, strategy=strategy, iterations=iterations,
                               width=width, depth=depth, relabel=relabel, no_cache=no_cache, no_eval=no_eval,
                               limits=limits,
                               events=events, start=start))


async def arefine(*, run: str | None = None, resume: str | None = None, base: str | None = None,
                  strategy: str | None = None, iterations: int | None = None, width: int | None = None,
                  depth: int | None = None, relabel: bool | None = None, no_cache: bool = False,
                  no_eval: bool = False, limits: Limits = Limits(), events: EventSink = null_sink,
                  start: Path = Path(".")) -> RefineResult:
    """``refine`` on the caller's event loop."""
    run_id = resume or run or new_run_id("refine")
    try:
        return await _refine(run_id, resume=resume, base=base, strategy=strategy, iterations=iterations,
                             width=width, depth=depth, relabel=relabel, no_cache=no_cache, no_eval=no_eval,
                             limits=limits, events=events, start=start)
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFullError.of(exc, f"continue with `brewkb refine --resume {run_id}`") from None
        raise


async def _refine(run_id: str, *, resume: str | None, base: str | None, strategy: str | None,
                  iterations: int | None, width: int | None, depth: int | None, relabel: bool | None,
                  no_cache: bool, no_eval: bool, limits: Limits, events: EventSink, start: Path) -> RefineResult:
    with KB.open(start, require_config=True) as kb, contextlib.ExitStack() as held:
        if base and resume is None:
            kb.store.resolve(base)  # an unknown revision is refused before the run folder exists
        folder = Run.at(kb.runs_dir, run_id, create=resume is None)
        source = folder.imported_from()
        if source is not None:
            raise RunError(f"run {run_id} holds trajectories imported from {source} logs, not episodes of the "
                           f"configured environment {kb.config.env.name!r}, which refine re-runs; learn from the "
                           f"logs with `brewkb distill {run_id}`")
        held.enter_context(folder.lock("refine"))
        held.enter_context(_budget_noted(folder))
        for lock in kb.store.clear_locks(BrewRef.run_prefix(run_id)):
            log.warning("removed %s, left by a killed process (this run's lock is held)", lock)
        recorded = folder.manifest().get("search_spec")
        if resume is not None and recorded is None:
            raise RunError(f"run {run_id} has not started a search; run `brewkb refine --run {run_id}` instead")
        if resume is None and recorded is not None:
            raise RunError(f"run {run_id} already exists; continue it with `brewkb refine --resume {run_id}`")
        if relabel is not None:
            kb.config = dataclasses.replace(kb.config, stages=dataclasses.replace(kb.config.stages, relabel=relabel))
        base_commit = recorded["base"] if recorded else kb.store.resolve(base) if base else kb.store.head_commit()
        if recorded is None and not base:
            for line in kb.uncommitted():
                log.warning(line)
        spec = SearchSpec.from_record(recorded["spec"]) if recorded else SearchSpec.from_config(
            kb.config.search, strategy=strategy, iterations=iterations, width=width, depth=depth)
        if not recorded:
            folder.set_manifest("search_spec", {"base": base_commit, "spec": dataclasses.asdict(spec)})
        async with Pipeline.open(kb, folder, no_cache=no_cache, events=events) as pipeline:
            here = "" if kb.root == Path.cwd().resolve() else f"-C {shlex.quote(str(kb.root))} "
            pipeline.retry = (f"fix the cause, then continue with `brewkb {here}refine --resume {run_id}` (finished "
                              "work is kept)")
            pipeline.charge(open_budget(kb.config, folder, limits_of(folder, limits), here))
            await pipeline.rollouts("train", context="kb", rev=base_commit)
            await pipeline.rollouts("eval", context="kb", rev=base_commit)
            await pipeline.grades()
            await pipeline.relabel()
            await pipeline.reflections()
            concepts = await pipeline.concepts()
            roots = {r.name: r for r in await pipeline.integrate()}
            concepts = [c for c in concepts if c.slug in roots]
            if not concepts:
                raise RunError(f"run {run_id} found no concept to refine (see runs/{run_id}/manifest.json); "
                               "more or more varied trajectories are needed")
            try:
                result, choices = await _search(kb, pipeline, folder, spec, base_commit, concepts, roots, events)
            except AllFailedError as exc:
                raise AllFailedError(f"{exc}; {pipeline.retry}") from None
            changed = sorted(c for c, ch in choices.items() if ch.node is not None)
            held_out = None if no_eval else await _held_out(kb, pipeline, result.kb_commit, base_commit, changed,
                                                            events)
            mapping = json.loads(folder.file("concepts.json").read_text())["mapping"]
            insights = await _stage_insights(pipeline, mapping, {c.slug: () for c in concepts})
        store = SearchStore(kb.store, run_id, base_commit, kb.recipes_prefix())
        stored = EpisodeCache(0, folder.file("episodes.jsonl")).episodes.values()
        episodes = [*folder.read_trajectories(FILES["rollouts"]), *(t for ts in stored for t in ts)]
        from_logs = from_logs_of(store, episodes, insights, scrubber_of(kb.config.scrub).trajectory,
                                 kb.config.tools.signatures)
        pr = store.write_pr(refine_message(run_id, spec, result, base_commit, choices,
                                           _evidence(kb, folder, held_out), from_logs), spec.rounds)
        nodes = sum(len(t.nodes) for t in result.trees.values())
        marked = chosen_nodes(result.trees, choices)
        summary = {c: {**note_of(result, c), "searched": note_of(result, c)["node"], "node": marked[c],
                       "final": choices[c].to_json()} for c in sorted(result.trees)}
        folder.record_stage("search", nodes=nodes, episodes_run=result.episodes_run,
                            episodes_reused=result.episodes_reused, kb=result.kb_commit, pr=pr)
        return RefineResult(run_id, result.kb_commit, pr, summary, nodes, result.episodes_run, result.episodes_reused)


@contextlib.contextmanager
def _budget_noted(folder: Run) -> Iterator[None]:
    """Note in the run's manifest which limit stopped it (``brewkb runs`` then
    says to raise that one; a run stopped otherwise resumes as it is)."""
    if folder.manifest().get(BUDGET_SPENT):
        folder.set_manifest(BUDGET_SPENT, None)
    try:
        yield
    except BudgetExhausted as exc:
        folder.set_manifest(BUDGET_SPENT, exc.option)
        raise


async def _search(kb: KB, pipeline: Pipeline, folder: Run, spec: SearchSpec, base: str, concepts: list[Any],
                  roots: dict[str, Any], events: EventSink) -> tuple[SearchResult, dict[str, FinalChoice]]:
    config = kb.config
    cache = EpisodeCache(config.search.reuse, folder.file("episodes.jsonl"))
    env = pipeline.env
    tasks = {t.id: t for split in ("train", "eval") for t in env.tasks(split)}
    q_train = {c.slug: c.q_train for c in concepts}
    mapping = json.loads(folder.file("concepts.json").read_text())["mapping"]
    common = {"env": env, "agent": pipeline.agent, "executor": pipeline.executor, "cache": cache, "tasks": tasks,
              "k": config.retrieval.k, "budget": config.retrieval.context_tokens, "retriever": retriever_of(kb, pipeline.client)}
    expander = Expander(**common, backend=pipeline.backend, q_train=q_train,
                        mapping={n: s for n, s in mapping.items() if s in q_train},
                        titles={c.slug: (c.title, c.aliases) for c in concepts},
                        threshold=config.stages.concept_threshold, retries=config.stages.integrate_retries,
                        tools=config.tools.signatures, max_concepts=config.stages.concepts_per_trajectory,
                        insights=await _stage_insights(pipeline, mapping, q_train),
                        journal=folder.file("insights.jsonl"), rubrics=pipeline.rubrics(),
                        scrubber=scrubber_of(config.scrub), accept_failed=config.stages.accept_failed)
    evaluator = Evaluator(**common, q_eval={c.slug: c.q_eval for c in concepts}, q_train=q_train,
                          lambda_corr=spec.lambda_corr, lambda_ret=spec.lambda_ret)
    store = SearchStore(kb.store, folder.id, base, kb.recipes_prefix())
    result = await search(spec, store, expander, evaluator, {c.slug: roots[c.slug] for c in concepts}, events)
    events(Event("stage_started", "final", total=len(result.trees)))
    choices = await finalize(store, evaluator, result.trees, candidates=config.search.final_candidates,
                             min_gain=config.search.min_gain, lambdas=(spec.lambda_corr, spec.lambda_ret),
                             iteration=spec.rounds + 1, max_bytes=config.kb.max_recipe_kb * 1024)
    # the KB the PR holds: the final gather, whether this process or an interrupted one wrote it
    result = dataclasses.replace(result, kb_commit=store.final_commit() or result.kb_commit)
    # a recipe the PR adds (its first version kept) is a change as much as a rewritten one
    events(Event("stage_finished", "final", message=_changes(sum(not c.left_out and (c.base == "root" or not c.kept)
                                                                 for c in choices.values()))))
    ledger = Ledger(folder.file("ledger.jsonl"))  # episodes run are recorded as they finish (BudgetedExecutor)
    ledger.record(LedgerEntry("agent", "episodes", cached=True, kind="episode", count=result.episodes_reused))
    return result, choices


async def _held_out(kb: KB, pipeline: Pipeline, kb_commit: str | None, base: str,
                    changed: list[str], events: EventSink = null_sink) -> dict[str, Any]:
    """The test split with the new KB (the final gather), the base KB and no KB,
    and each changed recipe's leave-one-recipe-out effect, saved as the run's
    ``eval.json``; the test split never enters a stage. Its episodes and calls
    are the run's: in its ledger, its cache entries and its budget. A run
    resumed after it is saved does not evaluate again, and one resumed in the
    middle of it runs only the episodes that had not finished."""
    revs = (kb_commit or base, base)
    path = pipeline.run.file(EVAL_FILE)
    try:
        saved = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        saved = None  # damaged: evaluated again
    if isinstance(saved, dict) and saved.get("revisions") == list(revs) and saved.get("effects_of") == changed:
        events(Event("stage_skipped", "held-out", message="already done"))
        return saved
    journal = Journal(pipeline.run.file("eval.partial.jsonl"),
                      lambda n: events(Event("item_done", "held-out", done=n)))
    events(Event("stage_started", "held-out", done=len(journal.done), total=3 * len(pipeline.env.tasks("test"))))
    columns, effects = await evaluate_arms(kb, pipeline.agent, pipeline.env, pipeline.executor,
                                           revs=revs, contexts=("none",), split="test",
                                           effects=changed, client=pipeline.client, journal=journal)
    labelled = [dataclasses.replace(c, label=label) for c, label in zip(
        columns, ("no KB", "new KB (this PR)", f"base KB ({base[:12]})"), strict=True)]
    evaluation = {"split": "test", "repeats": 1, "columns": [c.to_json() for c in (labelled[1], labelled[2],
                                                                                  labelled[0])],
                  "effects": [e.to_json() for e in effects], "revisions": list(revs), "effects_of": changed}
    write_atomic(path, json.dumps(evaluation, indent=2) + "\n")
    journal.close()
    events(Event("stage_finished", "held-out", message=f"{len(columns)} columns"))
    return evaluation


def _evidence(kb: KB, folder: Run, evaluation: dict[str, Any] | None) -> str:
    """The held-out tables and what produced them, for the ``pr`` commit message
    (after what the run left out, when it went on without failed items)."""
    missing = left_out(folder.manifest().get("stages", {}))
    return (missing + "\n\n" if missing else "") + _held_out_record(kb, folder, evaluation)


def _held_out_record(kb: KB, folder: Run, evaluation: dict[str, Any] | None) -> str:
    if evaluation is None:
        return "Held-out evaluation skipped (--no-eval); run `brewkb eval --split test` for it.\n"
    config = kb.config
    models = {role: getattr(config.llm.roles, role).model or config.llm.model
              for role in ("agent", "reflector", "integrator", "judge")}
    ledger = folder.file("ledger.jsonl")
    totals = summarise(read_ledger(ledger), config.llm.prices) if ledger.exists() else {}
    cost = sum(t.cost for t in totals.values())
    calls = sum(t.calls - t.cached for t in totals.values())
    table = eval_table(evaluation) + [""] + effects_table(evaluation)
    shown = "none (deterministic offline rules)" if config.llm.backend == "offline" else \
        ", ".join(f"{r} {m}" for r, m in models.items())
    return ("\n".join(table) + "\n\n" +
            f"Backend {config.llm.backend}; agent {config.agent.name}; models {shown}" +
            f"; seeds: env {config.env.seed}, agent {config.agent.seed}, llm {config.llm.seed}, "
            f"stages {config.stages.seed}; LLM calls paid {calls}, cost ${cost:.4f} (ledger).\n")


async def _stage_insights(pipeline: Pipeline, mapping: dict[str, str],
                          q_train: dict[str, Any]) -> dict[str, list[Any]]:
    """Each concept's insights from the reflections stage (I_0 of its expansions)."""
    train, _ = await pipeline.reflections()
    out: dict[str, list[Any]] = {c: [] for c in q_train}
    for insight in train:
        if mapping.get(insight.concept) in out:
            out[mapping[insight.concept]].append(insight)
    return out


def load_trees(run: str, *, start: Path = Path(".")) -> tuple[dict[str, Tree], dict[str, int]]:
    """The run's search trees rebuilt from git (node branches, or the archive
    after ``gc``), and the node of each tree whose document the PR holds."""
    with KB.open(start) as kb:
        require_run(kb, run)
        base = find_base(kb.store, run)
        store = SearchStore(kb.store, run, base, kb.recipes_prefix())
        stored = store.load()
        store.report()
        state = rebuild(store, sorted(stored.nodes), stored)
        return state.trees, chosen_nodes(state.trees, recorded_choices(store))


def gc(run: str, *, start: Path = Path(".")) -> int:
    """Delete the run's node branches; ``kb``, ``pr``, the notes and an
    ``archive`` ref that keeps the node commits reachable (so ``tree`` and
    ``pr`` still show every reward) stay."""
    with KB.open(start) as kb:
        refs = {r: s for r, s in kb.store.list_refs(BrewRef.run_prefix(run)).items()
                if BrewRef.parse(r).kind == "node"}
        if not refs and not kb.store.list_refs(BrewRef.run_prefix(run)):
            Run.at(kb.runs_dir, run)  # a run without a search (an import) has no branches to delete
            return 0
        if refs:
            SearchStore(kb.store, run, find_base(kb.store, run), kb.recipes_prefix()).archive()
        return kb.store.delete_refs(refs)


def _changes(n: int) -> str:
    return f"{n} recipe{'' if n == 1 else 's'} change{'s' if n == 1 else ''}"

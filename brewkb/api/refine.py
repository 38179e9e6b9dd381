"""``refine``: the whole method, stages then search, ending with a PR branch;
``tree`` and ``gc`` for what a run leaves in git."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.api.loop import run_command
from brewkb.config import SearchConfig
from brewkb.errors import RunError
from brewkb.events import EventSink, null_sink
from brewkb.kb import KB
from brewkb.llm.ledger import Ledger, LedgerEntry
from brewkb.pipeline import Pipeline
from brewkb.refs import BrewRef
from brewkb.runs import Run, new_run_id
from brewkb.search.engine import SearchResult, SearchSpec, note_of, rebuild, search
from brewkb.search.episodes import EpisodeCache
from brewkb.search.evaluate import Evaluator
from brewkb.search.expand import Expander
from brewkb.search.store import SearchStore, find_base
from brewkb.search.tree import Tree, best_node

__all__ = ["RefineResult", "refine", "arefine", "load_trees", "gc", "pr_message"]


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


def _spec(config: SearchConfig, overrides: dict[str, Any]) -> SearchSpec:
    spec = SearchSpec(strategy=config.strategy, iterations=config.iterations, width=config.width,
                      depth=config.depth, samples=config.samples, exploration=config.exploration,
                      lambda_corr=config.lambda_corr, lambda_ret=config.lambda_ret)
    return dataclasses.replace(spec, **{k: v for k, v in overrides.items() if v is not None})


def pr_message(run: str, spec: SearchSpec, result: SearchResult, base: str) -> str:
    """The ``pr`` commit's message: a pull-request body with a reward table
    (``brewkb pr`` adds the evaluation and the search tree)."""
    rows = ["| recipe | root reward | final reward (mean) | node | nodes tried |", "|---|---:|---:|---|---:|"]
    for concept in sorted(result.trees):
        info = note_of(result, concept)
        root = "–" if info["root_reward"] is None else f"{info['root_reward']:.3f}"
        rows.append(f"| `{concept}` | {root} | {info['mean']:.3f} | n{info['node']} | {info['nodes']} |")
    return (f"brew({run}): {len(result.trees)} recipes refined by {spec.strategy}\n\n"
            f"Base {base[:12]}; strategy {spec.strategy}, {spec.rounds} rounds, width {spec.width}, depth "
            f"{spec.depth}; reward = {spec.lambda_corr}·success + {spec.lambda_ret}·MRR.\n\n" + "\n".join(rows) +
            f"\n\nEvaluation episodes run: {result.eval_episodes_run}; reused instead of run: "
            f"{result.eval_episodes_reused}.\n"
            f"Audit trail: `git log --notes=brew --first-parent brew/{run}/kb`, `brewkb tree {run}`.\n\n"
            f"Brew-Run: {run}\n")


def refine(*, run: str | None = None, resume: str | None = None, base: str | None = None,
           strategy: str | None = None, iterations: int | None = None, width: int | None = None,
           depth: int | None = None, relabel: bool | None = None, no_cache: bool = False,
           events: EventSink = null_sink, start: Path = Path(".")) -> RefineResult:
    """Run the stages and the search; ``resume`` continues a run from its files and git."""
    return run_command(arefine(run=run, resume=resume, base=base, strategy=strategy, iterations=iterations,
                               width=width, depth=depth, relabel=relabel, no_cache=no_cache, events=events,
                               start=start))


async def arefine(*, run: str | None = None, resume: str | None = None, base: str | None = None,
                  strategy: str | None = None, iterations: int | None = None, width: int | None = None,
                  depth: int | None = None, relabel: bool | None = None, no_cache: bool = False,
                  events: EventSink = null_sink, start: Path = Path(".")) -> RefineResult:
    """``refine`` on the caller's event loop."""
    with KB.open(start) as kb:
        run_id = resume or run or new_run_id("refine")
        folder = Run.at(kb.runs_dir, run_id, create=resume is None)
        recorded = folder.manifest().get("search_spec")
        if resume is not None and recorded is None:
            raise RunError(f"run {run_id} has not started a search; run `brewkb refine --run {run_id}` instead")
        if resume is None and recorded is not None:
            raise RunError(f"run {run_id} already exists; continue it with `brewkb refine --resume {run_id}`")
        if relabel is not None:
            kb.config = dataclasses.replace(kb.config, stages=dataclasses.replace(kb.config.stages, relabel=relabel))
        base_commit = recorded["base"] if recorded else kb.store.resolve(base) if base else kb.store.head_commit()
        spec = SearchSpec(**recorded["spec"]) if recorded else _spec(kb.config.search, {
            "strategy": strategy, "iterations": iterations, "width": width, "depth": depth})
        if not recorded:
            folder.set_manifest("search_spec", {"base": base_commit, "spec": dataclasses.asdict(spec)})
        async with Pipeline.open(kb, folder, no_cache=no_cache, events=events) as pipeline:
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
            result = await _search(kb, pipeline, folder, spec, base_commit, concepts, roots, events)
        store = SearchStore(kb.store, run_id, base_commit, kb.recipes_prefix())
        pr = store.write_pr(pr_message(run_id, spec, result, base_commit), spec.rounds)
        nodes = sum(len(t.nodes) for t in result.trees.values())
        summary = {c: note_of(result, c) for c in sorted(result.trees)}
        folder.record_stage("search", nodes=nodes, episodes_run=result.episodes_run,
                            episodes_reused=result.episodes_reused, kb=result.kb_commit, pr=pr)
        return RefineResult(run_id, result.kb_commit, pr, summary, nodes, result.episodes_run, result.episodes_reused)


async def _search(kb: KB, pipeline: Pipeline, folder: Run, spec: SearchSpec, base: str, concepts: list[Any],
            roots: dict[str, Any], events: EventSink) -> SearchResult:
    config = kb.config
    cache = EpisodeCache(config.search.reuse, folder.file("episodes.jsonl"))
    env = pipeline.env
    tasks = {t.id: t for split in ("train", "eval") for t in env.tasks(split)}
    q_train = {c.slug: c.q_train for c in concepts}
    mapping = json.loads(folder.file("concepts.json").read_text())["mapping"]
    common = {"env": env, "agent": pipeline.agent, "executor": pipeline.executor, "cache": cache, "tasks": tasks,
              "k": config.retrieval.k, "budget": config.retrieval.context_tokens, "boosts": config.retrieval.boosts}
    expander = Expander(**common, backend=pipeline.backend, q_train=q_train,
                        mapping={n: s for n, s in mapping.items() if s in q_train},
                        titles={c.slug: (c.title, c.aliases) for c in concepts},
                        threshold=config.stages.concept_threshold, retries=config.stages.integrate_retries,
                        max_concepts=config.stages.concepts_per_trajectory)
    evaluator = Evaluator(**common, q_eval={c.slug: c.q_eval for c in concepts}, q_train=q_train,
                          lambda_corr=spec.lambda_corr, lambda_ret=spec.lambda_ret)
    store = SearchStore(kb.store, folder.id, base, kb.recipes_prefix())
    result = await search(spec, store, expander, evaluator, {c.slug: roots[c.slug] for c in concepts}, events)
    ledger = Ledger(folder.file("ledger.jsonl"))
    ledger.record(LedgerEntry("agent", "episodes", cached=False, kind="episode", count=result.episodes_run))
    ledger.record(LedgerEntry("agent", "episodes", cached=True, kind="episode", count=result.episodes_reused))
    return result


def load_trees(run: str, *, start: Path = Path(".")) -> tuple[dict[str, Tree], dict[str, int]]:
    """The run's search trees rebuilt from git, and each tree's best node."""
    with KB.open(start) as kb:
        base = find_base(kb.store, run)
        store = SearchStore(kb.store, run, base, kb.recipes_prefix())
        stored = store.load()
        state = rebuild(store, sorted(stored.nodes), stored)
        return state.trees, {c: best_node(t).id for c, t in state.trees.items()}


def gc(run: str, *, start: Path = Path(".")) -> int:
    """Delete the run's node branches; ``kb``, ``pr`` and the notes stay."""
    with KB.open(start) as kb:
        refs = {r: s for r, s in kb.store.list_refs(BrewRef.run_prefix(run)).items()
                if BrewRef.parse(r).kind == "node"}
        if not refs and not kb.store.list_refs(BrewRef.run_prefix(run)):
            raise RunError(f"no run {run!r} in this repository")
        return kb.store.delete_refs(refs)

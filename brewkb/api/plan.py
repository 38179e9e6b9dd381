"""``refine --plan`` and the budgets of ``refine``: what a run may spend at
most, from counts alone, and the limits that stop it before it spends more."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from brewkb.agents import check_agent_name
from brewkb.api.trajectories import recorded_conversations
from brewkb.config import Config
from brewkb.envs import load_environment
from brewkb.errors import RunError
from brewkb.kb import KB
from brewkb.llm.ledger import read_ledger
from brewkb.run.budget import Budget, Limits, spent
from brewkb.run.folder import FILES, STAGES, Run
from brewkb.run.plan import JSON_ROLES, PlanInputs, RunPlan, plan_refine, with_cost
from brewkb.search.engine import SearchSpec
from brewkb.stages import relabel as relabel_stage
from brewkb.stages.concepts import concept_bound, held_out

__all__ = ["refine_plan", "distill_plan", "open_budget", "limits_of", "LEDGER", "SECONDS_PER_CALL"]

LEDGER = "ledger.jsonl"
SECONDS_PER_CALL = 10.0
"""The seconds per LLM call a plan assumes before a run has measured its own:
a small model on a laptop's CPU (llama.cpp, 1–2 B parameters) takes 8–30 s."""


def limits_of(folder: Run, given: Limits) -> Limits:
    """The run's limits: those given now, else those it was started or last
    resumed with (recorded in the manifest, so a plain ``--resume`` keeps them)."""
    recorded = folder.manifest().get("limits") or {}
    merged = Limits(**{f.name: getattr(given, f.name) if getattr(given, f.name) is not None else recorded.get(f.name)
                       for f in dataclasses.fields(Limits)})
    if merged.any:
        folder.set_manifest("limits", dataclasses.asdict(merged))
    return merged


def open_budget(config: Config, folder: Run, limits: Limits, here: str = "") -> Budget:
    """A budget that counts what the run already spent (from its ledger); it
    raises at once when that is already the limit. ``here``: ``-C DIR `` for
    the command its message suggests, when the KB is not the current folder."""
    episodes, calls, cost = spent(read_ledger(folder.file(LEDGER)), config.llm.prices)
    budget = Budget(limits, config.llm.prices, episodes=episodes, calls=calls, cost=cost, run=folder.id, here=here)
    budget.check()
    return budget


def refine_plan(*, run: str | None = None, resume: str | None = None, strategy: str | None = None,
                iterations: int | None = None, width: int | None = None, depth: int | None = None,
                relabel: bool | None = None, no_eval: bool = False, base: str | None = None,
                seconds_per_call: float = SECONDS_PER_CALL, start: Path = Path(".")) -> RunPlan:
    """The most a ``refine`` with these settings (or the rest of run ``resume``)
    can spend: agent episodes, LLM calls per role, a cost estimate and how
    long the calls take at most at ``seconds_per_call`` (the run's own average
    latency once it has a ledger) and ``llm.concurrency`` in flight
    (``no_eval``: without the held-out evaluation). Calls nothing and writes
    nothing."""
    from brewkb.search.store import SearchStore

    with KB.open(start, require_config=True) as kb:
        config = kb.config
        if base:
            kb.store.resolve(base)  # refused as `refine --base` would be
        folder = Run.at(kb.runs_dir, resume, create=False) if resume else None
        if run and (kb.runs_dir / run / "manifest.json").exists():
            raise RunError(f"run {run} already exists; plan the rest of it with `brewkb refine --resume {run} --plan`")
        recorded = folder.manifest().get("search_spec") if folder else None
        spec = SearchSpec.from_record(recorded["spec"]) if recorded is not None else SearchSpec.from_config(
            config.search, strategy=strategy, iterations=iterations, width=width, depth=depth)
        env = load_environment(config.env, kb.root)
        check_agent_name(config.agent.name)  # refused here as the run would refuse it
        llm_agent = config.agent.name == "tool-agent" and config.llm.backend != "offline"
        train = {t.id for t in env.tasks("train")}
        use_relabel = config.stages.relabel if relabel is None else relabel
        inputs = PlanInputs(
            train_tasks=len(train), eval_tasks=len(env.tasks("eval")), rounds=spec.rounds,
            per_expansion=spec.per_expansion, relabel=use_relabel,
            concepts_per_trajectory=config.stages.concepts_per_trajectory,
            min_concept_insights=config.stages.min_concept_insights,
            integrate_retries=config.stages.integrate_retries,
            agent_steps=config.agent.max_steps if llm_agent else 0,
            user_steps=config.agent.max_steps + 1 if llm_agent and hasattr(env, "user_prompt") else 0,
            fallback_calls=_fallback_allowance(config), final_candidates=config.search.final_candidates,
            test_tasks=0 if no_eval else len(env.tasks("test")), k=config.retrieval.k)
        if folder is not None:
            inputs = _progress(inputs, folder, train, config.stages.seed)
            if recorded is not None:
                store = SearchStore(kb.store, folder.id, recorded["base"], kb.recipes_prefix())
                inputs = dataclasses.replace(inputs, gathers=store.load().gathers)
        result = plan_refine(inputs)
        if config.llm.backend == "offline":
            result = dataclasses.replace(result, calls={r: 0 for r in result.calls})
        roles = config.llm.roles
        models = {r: getattr(roles, r).model or config.llm.model or os.environ.get("OPENAI_MODEL", "")
                  for r in result.calls}
        max_tokens = {r: getattr(roles, r).max_tokens for r in result.calls}
        measured = _latency(folder)
        result = dataclasses.replace(result, seconds_per_call=measured or seconds_per_call,
                                     in_flight=config.llm.concurrency, measured=measured is not None)
        return with_cost(result, models, max_tokens, config.llm.prices, _prompt_tokens(folder))


def _latency(folder: Run | None) -> float | None:
    """Seconds per LLM call the run has seen so far (``None`` before its first paid call)."""
    seen = [e.latency for e in read_ledger(folder.file(LEDGER)) if e.kind == "chat" and not e.cached
            and not e.error and e.latency] if folder else []
    return round(sum(seen) / len(seen), 2) if seen else None


def _fallback_allowance(config: Config) -> int:
    """Rejected calls a JSON role may meet while its endpoint's mode is found
    (two modes can be rejected, each by the calls in flight)."""
    llm = config.llm
    modes = {getattr(llm.roles, r).structured_output or llm.structured_output
             for r in JSON_ROLES}
    return 2 * llm.concurrency if llm.backend != "offline" and "auto" in modes else 0


def _progress(inputs: PlanInputs, folder: Run, train: set[str], seed: int) -> PlanInputs:
    """What a run has finished, from its files."""
    done = frozenset(s for s in (*STAGES, "search") if folder.stage_done(s))
    rollouts = folder.read_trajectories(FILES["rollouts"])
    selected = None
    if rollouts:
        selected = len([t for t in relabel_stage.select(rollouts, seed) if t.task_id in train])
    concepts = expansion = None
    path = folder.file(FILES["concepts"])
    if "concepts" in done and path.exists():
        found = json.loads(path.read_text(encoding="utf-8"))["concepts"]
        concepts = [(len([t for t in c["q_train"] if t in train]), len(c["q_eval"])) for c in found]
        expansion = len({t for c in found for t in c["q_train"] if t in train})
    return dataclasses.replace(inputs, done=done, relabel_selected=selected, concepts=concepts,
                               expansion_tasks=expansion)


def _prompt_tokens(folder: Run | None) -> dict[str, int]:
    """Average prompt tokens per call and role in the run's ledger so far."""
    totals: dict[str, list[int]] = {}
    for e in read_ledger(folder.file(LEDGER)) if folder else ():
        if e.kind != "episode" and not e.cached and e.tokens_in:
            totals.setdefault(e.role, []).append(e.tokens_in)
    return {r: round(sum(v) / len(v)) for r, v in totals.items()}


def distill_plan(run: str, *, strategy: str | None = None, iterations: int | None = None, width: int | None = None,
                 depth: int | None = None, start: Path = Path(".")) -> tuple[RunPlan, dict[str, int]]:
    """The most ``distill RUN`` can call (or the rest of it), and the counts
    it rests on (``trajectories``, ``unlabelled``, ``tasks`` and the ``held_out``
    ones). Calls nothing, writes nothing."""
    from brewkb.run.plan import DistillInputs, plan_distill

    with KB.open(start, require_config=True) as kb:
        config = kb.config
        folder = Run.at(kb.runs_dir, run)
        recorded = folder.manifest().get("search_spec")
        spec = SearchSpec(**recorded["spec"]) if recorded is not None else SearchSpec.from_config(
            config.search, strategy=strategy, iterations=iterations, width=width, depth=depth)
        # a serve run whose conversations are not imported yet: those distill will import
        logged = folder.read_trajectories(FILES["rollouts"]) or recorded_conversations(folder)
        unlabelled = sum(t.success is None for t in logged)
        done = frozenset(s for s in (*STAGES, "outcomes", "search") if folder.stage_done(s))
        path = folder.file(FILES["concepts"])
        concepts = len(json.loads(path.read_text(encoding="utf-8"))["concepts"]) \
            if "concepts" in done and path.exists() else None
        held, test = held_out(logged, config.stages.min_concept_tasks, config.tools.signatures)  # as distill will
        learning = len({t.task_id for t in logged} - held - test)
        per_task = config.stages.concepts_per_task
        bound = concept_bound(learning, per_task)
        result = plan_distill(DistillInputs(
            trajectories=len(logged), unlabelled=unlabelled if config.llm.backend != "offline" else 0,
            rounds=spec.rounds, per_expansion=spec.per_expansion, done=done, concepts=concepts,
            concepts_per_trajectory=config.stages.concepts_per_trajectory,
            min_concept_insights=config.stages.min_concept_insights,
            integrate_retries=config.stages.integrate_retries, fallback_calls=_fallback_allowance(config),
            max_concepts=bound, concepts_rule=f"stages.concepts_per_task {per_task:g} × {learning} learning tasks, "
                                             f"rounded up; each done in {config.stages.min_concept_tasks} tasks or "
                                             "more (stages.min_concept_tasks)"))
        if config.llm.backend == "offline":
            result = dataclasses.replace(result, calls={r: 0 for r in result.calls})
        roles = config.llm.roles
        models = {r: getattr(roles, r).model or config.llm.model or os.environ.get("OPENAI_MODEL", "")
                  for r in result.calls}
        max_tokens = {r: getattr(roles, r).max_tokens for r in result.calls}
        plan = with_cost(result, models, max_tokens, config.llm.prices, _prompt_tokens(folder))
        return plan, {"trajectories": len(logged), "unlabelled": unlabelled,
                      "tasks": len({t.task_id for t in logged}), "held_out": len(held) + len(test)}

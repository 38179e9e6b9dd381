"""``eval``: the agent on a split, once per KB revision or baseline, side by side."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from brewkb.agents.base import episode_error, retrieves_per_turn
from brewkb.agents.executors import Job, make_executor
from brewkb.api.loop import run_command
from brewkb.errors import AllFailedError, BrewError
from brewkb.events import EventSink, null_sink
from brewkb.fsutil import write_atomic
from brewkb.kb import KB
from brewkb.llm import open_backend
from brewkb.retrieval.context import MemoryContext, NoContext, RecipeContext
from brewkb.retrieval.memory import MEMORIES
from brewkb.retrieval.ranking import Retriever, open_index, retriever_of
from brewkb.run.folder import FILES, Journal, Run
from brewkb.run.record import EVAL_FILE
from brewkb.stages.rollouts import make_jobs
from brewkb.trajectories.schema import Trajectory, read_jsonl

__all__ = ["Column", "Effect", "evaluate", "aevaluate", "LEDGER_FILE"]

LEDGER_FILE = "ledger.jsonl"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Column:
    """One arm of an evaluation: ``label`` is ``none``, ``trajectories``, a
    revision, or ``working tree``."""

    label: str
    episodes: int
    tasks: int
    success_rate: float
    ci_low: float
    ci_high: float
    mean_steps_success: float | None
    llm_calls: int
    tokens: int
    recipes: int | None
    failed_to_run: int = 0
    """Episodes the agent or its endpoint could not run (counted as failures)."""
    first_error: str | None = None
    degenerate: int = 0
    """Conversations that went nowhere (a user who never stated a request, turns that repeat)."""
    ledger: str | None = None
    """The file where the evaluation's LLM calls are recorded (none for the offline backend)."""
    # graders' per-episode scores averaged over the episodes when every episode has
    # them: SpreadsheetBench's ``first_case`` (the paper's metric), ``soft`` and ``hard``
    scores: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Effect:
    """A recipe's own effect (leave-one-recipe-out): success on the tasks that
    retrieved it, with the KB and with the same KB without it."""

    recipe: str
    tasks: int
    with_recipe: float
    without_recipe: float
    episodes_run: int
    episodes_reused: int

    @property
    def effect(self) -> float:
        return round(self.with_recipe - self.without_recipe, 4)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "effect": self.effect}


def _ci(per_task: np.ndarray, seed: int = 0, rounds: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of the mean success over tasks."""
    if len(per_task) == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = rng.choice(per_task, size=(rounds, len(per_task)), replace=True).mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _column(label: str, runs: Sequence[Trajectory], recipes: int | None) -> Column:
    by_task: dict[str, list[bool]] = {}
    for t in runs:
        if t.success is not None:  # an unknown outcome is neither a success nor a failure
            by_task.setdefault(t.task_id, []).append(t.success)
    per_task = np.array([np.mean(v) for v in by_task.values()], dtype=float)
    wins = [t for t in runs if t.success is True]
    errors = [e for t in runs if (e := episode_error(t)) is not None]
    if runs and len(errors) == len(runs):
        raise AllFailedError(f"all {len(runs)} episodes of '{label}' failed to run: {errors[0]}; fix the agent or "
                             "its endpoint and run the evaluation again")
    low, high = _ci(per_task)
    return Column(label=label, episodes=len(runs), tasks=len(by_task),
                  success_rate=round(float(per_task.mean()) if len(per_task) else 0.0, 4),
                  ci_low=round(low, 4), ci_high=round(high, 4),
                  mean_steps_success=round(sum(t.steps for t in wins) / len(wins), 2) if wins else None,
                  llm_calls=sum(_usage(t, "calls") for t in runs),
                  tokens=sum(_usage(t, "tokens_in") + _usage(t, "tokens_out") for t in runs),
                  recipes=recipes, failed_to_run=len(errors), first_error=errors[0] if errors else None,
                  degenerate=sum(1 for t in runs if t.meta.get("degenerate")), scores=_scores(runs))


def _usage(trajectory: Trajectory, key: str) -> int:
    """The agent's ``key`` in an episode plus its user simulator's (τ²'s user role)."""
    user = trajectory.meta.get("user")
    return int(trajectory.usage.get(key, 0)) + (int(user.get(key, 0)) if isinstance(user, dict) else 0)


SCORES = ("first_case", "soft", "hard")


def _scores(runs: Sequence[Trajectory]) -> dict[str, float]:
    """The environment's own scores, averaged over every episode where its
    grader gives them; an episode without one (it failed to run) counts 0."""
    out = {}
    for key in SCORES:
        values = [t.outcome.detail.get(key) for t in runs]
        if any(isinstance(v, int | float) for v in values):
            out[key] = round(sum(v for v in values if isinstance(v, int | float)) / len(values), 4)
    return out


def _pool(kb: KB, from_run: str | None, context: str) -> list[Trajectory]:
    """The trajectories a baseline memory holds: those of ``from_run``, else
    of the run that rolled out last (the memory keeps the ones that passed)."""
    runs = [Run.at(kb.runs_dir, from_run)] if from_run else sorted(
        (Run(p.name, p) for p in kb.runs_dir.glob("*") if (p / FILES["rollouts"]).exists()),
        key=lambda r: r.file(FILES["rollouts"]).stat().st_mtime, reverse=True)
    if not runs:
        raise BrewError(f"--context {context} needs past trajectories: run `brewkb rollout` (or `brewkb import`) "
                        "first, or name a run with --from-run")
    return list(read_jsonl(runs[0].file(FILES["rollouts"])))


def evaluate(*, revs: Sequence[str] = (), contexts: Sequence[str] = (), split: str = "test", repeats: int = 1,
             from_run: str | None = None, save_to: str | None = None, env_name: str | None = None,
             agent_name: str | None = None, data: Path | None = None, events: EventSink = null_sink,
             start: Path = Path(".")) -> list[Column]:
    """One column per baseline in ``contexts`` and per revision in ``revs``
    (see ``aevaluate``)."""
    return run_command(aevaluate(revs=revs, contexts=contexts, split=split, repeats=repeats, from_run=from_run,
                                 save_to=save_to, env_name=env_name, agent_name=agent_name, data=data,
                                 events=events, start=start))


async def aevaluate(*, revs: Sequence[str] = (), contexts: Sequence[str] = (), split: str = "test",
                    repeats: int = 1, from_run: str | None = None, save_to: str | None = None,
                    env_name: str | None = None, agent_name: str | None = None, data: Path | None = None,
                    events: EventSink = null_sink, start: Path = Path(".")) -> list[Column]:
    """One column per baseline in ``contexts`` (``none``, ``trajectories``, ``notes``) and per
    revision in ``revs`` (``.`` or ``working-tree`` for the working tree). With
    neither: ``none`` against the working tree's recipes. ``env_name``,
    ``agent_name`` and ``data`` override the config for this evaluation."""
    if not revs and not contexts:
        contexts, revs = ("none",), (".",)
    with KB.open(start, require_config=True) as kb:
        config = kb.config
        run = Run.at(kb.runs_dir, save_to) if save_to else None  # an unknown run is refused before any episode
        ledger = run.file(LEDGER_FILE) if run is not None else kb.cache_dir / "eval" / LEDGER_FILE
        if env_name or data is not None:
            config = dataclasses.replace(config, env=dataclasses.replace(
                config.env, name=env_name or config.env.name,
                data=str(data.resolve()) if data is not None else config.env.data))
        if agent_name:
            config = dataclasses.replace(config, agent=dataclasses.replace(config.agent, name=agent_name))
        _, client = open_backend(config.llm, cache_dir=kb.cache_dir, seed=config.stages.seed, run=save_to or "",
                                 ledger_path=ledger)
        from brewkb.agents import load_agent
        from brewkb.envs import load_environment

        executor = make_executor(config.executor)
        try:
            if client is not None:
                await client.check_models()  # a model that cannot be named is refused before any episode
            columns, _ = await evaluate_arms(kb, load_agent(config, kb.root, client),
                                             load_environment(config.env, kb.root), executor, revs=revs,
                                             contexts=contexts, split=split, repeats=repeats, from_run=from_run,
                                             client=client)
        finally:
            await executor.aclose()
            if client is not None:
                await client.aclose()
        if client is not None:
            columns = [dataclasses.replace(c, ledger=str(ledger)) for c in columns]
        if run is not None:
            _replacing(run)
            write_atomic(run.file(EVAL_FILE), json.dumps({"split": split, "repeats": repeats, "columns": [
                c.to_json() for c in columns]}, indent=2) + "\n")
        return columns


def _replacing(run: Run) -> None:
    """Say what evaluation a run held before this one replaces it (its report and PR show only one)."""
    try:
        old = json.loads(run.file(EVAL_FILE).read_text(encoding="utf-8"))
        held = ", ".join(str(c["label"]) for c in old["columns"])
        split = old["split"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    log.warning("replaced the evaluation runs/%s/%s held (%s split: %s); the run's report and PR show this one now",
                run.id, EVAL_FILE, split, held)


async def evaluate_arms(kb: KB, agent: Any, env: Any, executor: Any, *, revs: Sequence[str] = (),
                        contexts: Sequence[str] = (), split: str = "test", repeats: int = 1,
                        from_run: str | None = None, effects: Sequence[str] = (),
                        client: Any = None, journal: Journal | None = None) -> tuple[list[Column], list[Effect]]:
    """The columns of ``aevaluate`` run with the caller's agent, environment,
    executor and LLM client (``refine`` passes its run's, so the calls are
    charged to the run), and the leave-one-recipe-out effect of each recipe in
    ``effects`` (recipes of the first revision). With a ``journal``, episodes
    it holds are not run again (an evaluation resumed after a crash)."""
    config = kb.config
    retriever = retriever_of(kb, client)
    tasks = env.tasks(split) * repeats
    if not tasks:
        raise BrewError(f"the {split} split of {env.name} has no tasks")
    arms: list[tuple[str, Any, int | None]] = []
    for context in contexts:
        if context == "none":
            arms.append(("none", NoContext(), None))
        elif context in MEMORIES:
            memory = MemoryContext(context, _pool(kb, from_run, context), retriever, config.retrieval.k,
                                   config.retrieval.context_tokens)
            arms.append((context, memory, None))
        else:
            raise BrewError(f"--context {context!r}: use none, trajectories or notes (a KB is a --rev)")
    for rev in revs:
        working = rev in (".", "working-tree")
        index = open_index(kb, None if working else rev, retriever)
        label = "working tree" if working else rev
        revision = None if working else kb.store.resolve(rev)
        arms.append((label, RecipeContext(index, revision, config.retrieval.k, config.retrieval.context_tokens),
                     len(index)))
    columns: list[Column] = []
    found: list[Effect] = []
    for label, provider, n_recipes in arms:
        jobs = make_jobs(tasks, provider, retrieves_per_turn(agent))
        results = await _run(executor, agent, env, jobs, [f"{label}#{i}" for i in range(len(jobs))], journal)
        columns.append(_column(label, [results[i] for i in range(len(jobs))], n_recipes))
        if effects and label == revs[0]:
            found = await _effects(kb, revs[0], effects, jobs, results, executor, agent, env, retriever, journal)
    return columns, found


async def _run(executor: Any, agent: Any, env: Any, jobs: Sequence[Job], keys: Sequence[str],
               journal: Journal | None) -> dict[int, Trajectory]:
    """A trajectory per job: the journal's, or run now (and journalled)."""
    results: dict[int, Trajectory] = {}
    for i, key in enumerate(keys):
        if journal is not None and (done := journal.get(key)) is not None:
            results[i] = done
    todo = [i for i in range(len(jobs)) if i not in results]

    def finished(n: int, trajectory: Trajectory) -> None:
        results[todo[n]] = trajectory
        if journal is not None:
            journal.put(keys[todo[n]], trajectory)

    await executor.run(agent, env, [jobs[i] for i in todo], finished)
    return results


async def _effects(kb: KB, rev: str, names: Sequence[str], jobs: Sequence[Job], results: dict[int, Trajectory],
                   executor: Any, agent: Any, env: Any, retriever: Retriever,
                   journal: Journal | None = None) -> list[Effect]:
    """Leave-one-recipe-out on the tasks whose episode retrieved each recipe
    (at any turn, with per-turn retrieval). An episode is run again only
    where removing the recipe changes the context; identical (task, context)
    pairs share one episode. With per-turn retrieval a later turn may differ
    whatever the first context, so every episode without the recipe is run."""
    config = kb.config
    per_turn = retrieves_per_turn(agent)
    recipes = kb.recipes(None if rev in (".", "working-tree") else rev)
    known = {(j.task.id, j.context): results[i] for i, j in enumerate(jobs)}
    plan: dict[str, list[tuple[int, tuple[str, str]]]] = {}
    todo: dict[tuple[str, str], Job] = {}
    reused = dict.fromkeys(names, 0)
    for name in names:
        index = retriever.index([r for r in recipes if r.name != name])
        provider = RecipeContext(index, None, config.retrieval.k, config.retrieval.context_tokens)
        plan[name] = []
        for i, job in enumerate(jobs):
            if name not in job.kb.recipes and name not in results[i].kb.recipes:
                continue
            [without] = make_jobs([job.task], provider, per_turn)
            # keyed apart from the full KB's episodes when per turn: the KB differs
            key = (job.task.id, f"{without.context}\0without {name}" if per_turn else without.context)
            plan[name].append((i, key))
            if key in known or key in todo:
                reused[name] += 1
            else:
                todo[key] = without
    keys = list(todo)
    names_of = [f"without#{k[0]}#{hashlib.sha256(k[1].encode()).hexdigest()[:16]}" for k in keys]
    runs = await _run(executor, agent, env, [todo[k] for k in keys], names_of, journal)
    known.update({k: runs[i] for i, k in enumerate(keys)})
    out = []
    for name in names:
        pairs = plan[name]
        if not pairs:
            continue
        with_rate = sum(results[i].success is True for i, _ in pairs) / len(pairs)
        without_rate = sum(known[key].success is True for _, key in pairs) / len(pairs)
        out.append(Effect(name, len(pairs), round(with_rate, 4), round(without_rate, 4),
                          len(pairs) - reused[name], reused[name]))
    return out

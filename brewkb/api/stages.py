"""``rollout``, ``reflect``, ``concepts``, ``integrate`` and ``runs``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from brewkb.api.loop import run_command
from brewkb.events import EventSink, null_sink
from brewkb.fsutil import write_atomic
from brewkb.kb import KB
from brewkb.pipeline import Pipeline
from brewkb.recipes import Recipe, render_recipe
from brewkb.runs import STAGES, Run, new_run_id
from brewkb.stages.concepts import Concept

__all__ = ["rollout", "reflect", "concepts", "integrate", "list_runs", "RunSummary"]

T = TypeVar("T")


def _pipeline(kb: KB, run: str, *, create: bool, no_cache: bool, events: EventSink,
              force: str | None) -> Pipeline:
    pipeline = Pipeline.open(kb, Run.at(kb.runs_dir, run, create=create), no_cache=no_cache, events=events)
    if force:
        pipeline.force(force)
    return pipeline


async def _with(pipeline: Pipeline, main: Callable[[Pipeline], Awaitable[T]]) -> T:
    async with pipeline:
        return await main(pipeline)


def rollout(*, run: str | None = None, splits: tuple[str, ...] = ("train", "eval"), context: str = "kb",
            rev: str | None = None, no_cache: bool = False, force: str | None = None,
            events: EventSink = null_sink, start: Path = Path(".")) -> tuple[str, dict[str, Any]]:
    """Run the agent on the train and eval tasks; returns the run id and stage summaries."""
    with KB.open(start) as kb:
        run_id = run or new_run_id()

        async def main(pipeline: Pipeline) -> dict[str, Any]:
            for split in splits:
                await pipeline.rollouts(split, context=context, rev=rev)
            stages = pipeline.run.manifest()["stages"]
            return {s: stages[s] for s in ("rollouts", "rollouts-eval") if s in stages}

        return run_id, run_command(_with(_pipeline(kb, run_id, create=True, no_cache=no_cache, events=events,
                                                   force=force), main))


def reflect(run: str, *, no_cache: bool = False, force: str | None = None, events: EventSink = null_sink,
            start: Path = Path(".")) -> dict[str, Any]:
    """Grade, relabel and reflect a run's trajectories."""
    async def main(pipeline: Pipeline) -> dict[str, Any]:
        await pipeline.grades()
        await pipeline.relabel()
        await pipeline.reflections()
        stages = pipeline.run.manifest()["stages"]
        return {s: stages[s] for s in ("grades", "relabel", "reflections") if s in stages}

    with KB.open(start) as kb:
        return run_command(_with(_pipeline(kb, run, create=False, no_cache=no_cache, events=events, force=force),
                                 main))


def concepts(run: str, *, no_cache: bool = False, force: str | None = None, events: EventSink = null_sink,
             start: Path = Path(".")) -> list[Concept]:
    async def main(pipeline: Pipeline) -> list[Concept]:
        return await pipeline.concepts()

    with KB.open(start) as kb:
        return run_command(_with(_pipeline(kb, run, create=False, no_cache=no_cache, events=events, force=force),
                                 main))


def integrate(run: str, *, write: bool = False, no_cache: bool = False, force: str | None = None,
              events: EventSink = null_sink, start: Path = Path(".")) -> tuple[list[Recipe], list[str]]:
    """Write one recipe per concept into the run (and into the KB's recipes
    folder with ``write``); returns the recipes and the KB files changed."""
    with KB.open(start) as kb:
        async def main(pipeline: Pipeline) -> list[Recipe]:
            return await pipeline.integrate()

        recipes = run_command(_with(_pipeline(kb, run, create=False, no_cache=no_cache, events=events,
                                              force=force), main))
        changed = []
        if write:
            for recipe in recipes:
                path = kb.recipes_dir / f"{recipe.name}.md"
                text = render_recipe(recipe)
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    write_atomic(path, text)
                    changed.append(str(path.relative_to(kb.root)))
        return recipes, changed


@dataclass(frozen=True)
class RunSummary:
    id: str
    stages: list[str]
    next_stage: str | None
    failures: int


def list_runs(*, start: Path = Path(".")) -> list[RunSummary]:
    with KB.open(start) as kb:
        if not kb.runs_dir.is_dir():
            return []
        out = []
        for folder in sorted(p for p in kb.runs_dir.iterdir() if p.is_dir()):
            run = Run(folder.name, folder)
            done = list(run.manifest().get("stages", {}))
            failures = folder / "failures.jsonl"
            out.append(RunSummary(folder.name, done, next((s for s in STAGES if s not in done), None),
                                  len(failures.read_text().splitlines()) if failures.exists() else 0))
        return out

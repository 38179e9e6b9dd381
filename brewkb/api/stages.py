"""``rollout``, ``reflect``, ``concepts``, ``integrate`` and ``runs``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from brewkb.api.loop import run_command
from brewkb.errors import RunError
from brewkb.events import EventSink, null_sink
from brewkb.fsutil import write_atomic
from brewkb.kb import KB
from brewkb.recipes import Recipe, render_for_file, slugify
from brewkb.run.folder import BUDGET_SPENT, LOCK, STAGES, Run, holder, new_run_id
from brewkb.run.pipeline import Pipeline
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
    held_out = [s for s in splits if s not in ("train", "eval")]
    if held_out:
        raise RunError(f"a run's stages use the train and eval splits only, not {held_out[0]!r} (held out so "
                       "that evaluations stay clean); evaluate on it with `brewkb eval --split test`")
    with KB.open(start, require_config=True) as kb:
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

    with KB.open(start, require_config=True) as kb:
        return run_command(_with(_pipeline(kb, run, create=False, no_cache=no_cache, events=events, force=force),
                                 main))


def concepts(run: str, *, no_cache: bool = False, force: str | None = None, events: EventSink = null_sink,
             start: Path = Path(".")) -> list[Concept]:
    async def main(pipeline: Pipeline) -> list[Concept]:
        return await pipeline.concepts()

    with KB.open(start, require_config=True) as kb:
        return run_command(_with(_pipeline(kb, run, create=False, no_cache=no_cache, events=events, force=force),
                                 main))


def integrate(run: str, *, write: bool = False, no_cache: bool = False, force: str | None = None,
              events: EventSink = null_sink, start: Path = Path(".")) -> tuple[list[Recipe], list[str]]:
    """Write one recipe per concept into the run (and into the KB's recipes
    folder with ``write``); returns the recipes and the KB files changed."""
    with KB.open(start, require_config=True) as kb:
        async def main(pipeline: Pipeline) -> list[Recipe]:
            return await pipeline.integrate()

        recipes = run_command(_with(_pipeline(kb, run, create=False, no_cache=no_cache, events=events,
                                              force=force), main))
        changed = []
        if write:
            for recipe in recipes:
                path = kb.recipes_dir / f"{slugify(recipe.name)}.md"
                text = render_for_file(recipe)
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    write_atomic(path, text)
                    changed.append(str(path.relative_to(kb.root)))
        return recipes, changed


@dataclass(frozen=True)
class RunSummary:
    """How far a run got. ``wanted`` are the stages it needs: an imported run
    needs no ``rollouts-eval`` and, as a refine run does, its ``search``."""

    id: str
    stages: list[str]
    next_stage: str | None
    failures: int
    wanted: tuple[str, ...] = STAGES
    resume: str = ""
    """The command that continues a refine or distill run (empty for other runs)."""
    retry: str = ""
    """The command that runs the next stage again, retrying its failed items (empty when none is pending)."""
    left_out: int = 0
    """Failed items of finished stages, which ``stages.accept_failed`` let the run go on without."""
    damaged: str = ""
    """What is wrong with a run whose record cannot be read (then nothing else is known)."""
    start: str = ""
    """The command that runs the stages of an imported run that no command has continued yet."""
    running: str = ""
    """The process working on the run now (``pid N: brewkb COMMAND``), or empty."""

    @property
    def status(self) -> str:
        if self.damaged:
            return f"damaged: {self.damaged}"
        if self.running:
            return f"in progress ({self.running})"
        if self.next_stage is None:
            return "complete"
        if self.resume:
            return f"stopped before {self.next_stage} finished; continue: {self.resume}"
        if self.start:
            return f"next: {self.next_stage}; run: {self.start}"
        return f"next: {self.next_stage}"


def summarise_run(run: Run) -> RunSummary:
    manifest = run.manifest()
    done = manifest.get("stages", {})
    imported = run.imported_from() is not None
    spec = manifest.get("search_spec")
    searched = ("search",) if spec or imported else ()  # distill searches every imported run
    wanted = tuple(s for s in STAGES if not (imported and s == "rollouts-eval")) + searched
    spent = manifest.get(BUDGET_SPENT)  # the limit that stopped it (kept with the run: raise it to go on)
    raise_ = f" {spent} N (N above the run's limit)" if spent else ""
    resume = "" if spec is None else f"brewkb distill {run.id}" if spec.get("kind") == "distill" else \
        f"brewkb refine --resume {run.id}{raise_}"
    following = next((s for s in wanted if s not in done), None)
    left_out, pending = _failures(run, done)
    retry = resume or _STAGE_COMMANDS.get(following or "", "").format(run=run.id) if pending else ""
    start = f"brewkb distill {run.id}" if imported and spec is None and following else ""
    owner = holder(run.file(LOCK))
    running = f"pid {owner.get('pid')}: brewkb {owner.get('command')}" if owner else ""
    return RunSummary(run.id, list(done), following, left_out + pending, wanted, resume, retry, left_out,
                      start=start, running=running)


_STAGE_COMMANDS = {"rollouts": "brewkb rollout --run {run}", "rollouts-eval": "brewkb rollout --run {run}",
                   "grades": "brewkb reflect {run}", "relabel": "brewkb reflect {run}",
                   "reflections": "brewkb reflect {run}", "integrate": "brewkb integrate {run}"}


def _failures(run: Run, done: dict[str, Any]) -> tuple[int, int]:
    """Items that failed and were not done since: what finished stages' manifest
    entries say failed (left out, ``stages.accept_failed``), and what the
    failures log holds for stages still to finish, each item once (an item
    that later succeeded is not counted)."""
    count = sum(int(info.get("failed", 0)) + int(info.get("failed_to_run", 0))
                for info in done.values() if isinstance(info, dict))
    log = run.file("failures.jsonl")
    pending: dict[tuple[str, str], int] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("stage") not in done:  # a later attempt at the same item replaces the earlier
                pending[(str(entry.get("stage")), str(entry.get("key")))] = int(entry.get("count", 1))
    return count, sum(pending.values())


def list_runs(*, start: Path = Path(".")) -> list[RunSummary]:
    with KB.open(start, require_kb=True) as kb:
        if not kb.runs_dir.is_dir():
            return []
        return [_summary(Run(folder.name, folder)) for folder in sorted(p for p in kb.runs_dir.iterdir() if p.is_dir())]


def _summary(run: Run) -> RunSummary:
    """A run's summary; a damaged one is listed as such, not in the way of the others."""
    try:
        return summarise_run(run)
    except RunError as exc:
        return RunSummary(run.id, [], None, 0, damaged=str(exc))

"""Runs the BREW stages for one run folder and persists what they produce.

Stages are pure; this is where their outputs become files. Each item is
appended to ``<stage>.partial.jsonl`` the moment it finishes, so a killed
process loses at most the item in flight; the same command run again skips
finished items, and a finished stage (recorded in the manifest) is skipped
whole. ``force`` redoes a stage and every stage after it.

Failures are loud and recoverable: an item that failed (an LLM call that
failed or kept answering invalid JSON, an episode the agent or endpoint could
not run) is not persisted, so the same command run again retries exactly the
failed items. A stage whose items all failed is not recorded as done and
raises ``AllFailedError`` with the count and the first error; one some of
whose items failed raises ``PartlyFailedError`` the same way, unless
``stages.accept_failed`` lets the run go on without them (the manifest counts
them, and the pull request lists them).

The stages are coroutines run on the command's one event loop (the API
function owns it, see docs/pipeline.md); ``aclose`` releases the executor and
the LLM client on that loop when the command ends.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.agents import load_agent
from brewkb.agents.base import episode_error, retrieves_per_turn
from brewkb.agents.executors import Executor, make_executor
from brewkb.config import Config
from brewkb.envs import load_environment
from brewkb.envs.base import Environment, Task
from brewkb.errors import BrewError, EndpointDown, LLMError, RunError
from brewkb.events import Event, Events, EventSink, null_sink
from brewkb.fsutil import write_atomic
from brewkb.kb import KB
from brewkb.llm import open_backend
from brewkb.llm.ledger import Ledger
from brewkb.llm.roles import Backend, Insight
from brewkb.recipes import Recipe, parse_recipe, render_recipe
from brewkb.retrieval.context import ContextProvider, NoContext, RecipeContext
from brewkb.retrieval.ranking import open_index, retriever_of
from brewkb.run.budget import Budget, BudgetedExecutor
from brewkb.run.folder import FILES, STAGES, Run
from brewkb.run.items import RETRY, StageItems
from brewkb.stages import concepts as concepts_stage
from brewkb.stages import calls, grading, integrate, reflect, relabel, rollouts
from brewkb.stages.concepts import Concept
from brewkb.trajectories.quote import read_texts
from brewkb.trajectories.schema import Trajectory
from brewkb.trajectories.scrub import scrubber_of

__all__ = ["Pipeline", "STAGES"]

@dataclass
class Pipeline(StageItems):
    kb: KB
    run: Run
    config: Config
    backend: Backend
    client: Any
    events: EventSink = null_sink
    retry: str = RETRY
    """What the error of a failed stage tells the user to do next."""
    _env: Environment | None = None
    _agent: Any = None
    _executor: Executor | None = None

    @classmethod
    def open(cls, kb: KB, run: Run, *, no_cache: bool = False, events: EventSink = null_sink) -> Pipeline:
        """The pipeline of ``run``, with the config snapshot it started with."""
        snapshot = run.file("config.toml")
        if not snapshot.exists():
            source = kb.root / "brewkb.toml"
            write_atomic(snapshot, source.read_text(encoding="utf-8") if source.exists() else "")
        config = kb.config
        backend, client = open_backend(config.llm, cache_dir=kb.cache_dir, ledger_path=run.file("ledger.jsonl"),
                                       no_cache=no_cache, seed=config.stages.seed, run=run.id)
        # every event also goes to the run's event log
        return cls(kb, run, config, backend, client, Events(run.file("events.jsonl"), events))

    async def __aenter__(self) -> Pipeline:
        if self.client is not None:
            try:
                await self.client.check_models()  # a model that cannot be named is refused before any work
            except BrewError:
                await self.aclose()
                raise
        return self

    async def __aexit__(self, kind: object, exc: object, tb: object) -> None:
        await self.aclose()
        if isinstance(exc, EndpointDown):  # the stop says how this command goes on once the endpoint runs
            raise exc.with_retry(self.retry) from None

    async def aclose(self) -> None:
        """Release the executor's workers and the LLM client (once, on the command's loop)."""
        executor, self._executor = self._executor, None
        try:
            if executor is not None:
                await executor.aclose()
        finally:
            if self.client is not None:
                await self.client.aclose()

    def charge(self, budget: Budget) -> None:
        """Charge every LLM call and agent episode from now on to ``budget``
        (episodes are also recorded in the ledger one by one)."""
        if self.client is not None:
            self.client.budget = budget
        self._executor = BudgetedExecutor(self.executor, budget, Ledger(self.run.file("ledger.jsonl")))

    # ------------------------------------------------------------ resources
    @property
    def env(self) -> Environment:
        if self._env is None:
            self._env = load_environment(self.config.env, self.kb.root)
        return self._env

    @property
    def agent(self) -> Any:
        if self._agent is None:
            self._agent = load_agent(self.config, self.kb.root, self.client)
        return self._agent

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = make_executor(self.config.executor)
        return self._executor

    def provider(self, context: str, rev: str | None) -> ContextProvider:
        """``none``, or ``kb``: the recipes at ``rev`` (the working tree when ``None``)."""
        if context == "none":
            return NoContext()
        index = open_index(self.kb, rev, retriever_of(self.kb, self.client))
        if not len(index):
            return NoContext()
        revision = self.kb.store.resolve(rev) if rev else None
        return RecipeContext(index, revision, self.config.retrieval.k, self.config.retrieval.context_tokens)

    # ---------------------------------------------------------- persistence
    def force(self, stage: str) -> None:
        """Forget ``stage`` and every stage after it."""
        if stage not in STAGES:
            raise RunError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
        manifest = self.run.manifest()
        for name in STAGES[STAGES.index(stage):]:
            manifest.get("stages", {}).pop(name, None)
            for path in (self.run.file(FILES[name]), self._partial_path(name)):
                path.unlink(missing_ok=True)
        write_atomic(self.run.file("manifest.json"), json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    # -------------------------------------------------------------- stages
    async def rollouts(self, split: str = "train", *, context: str = "kb", rev: str | None = None,
                 repeats: int = 1) -> list[Trajectory]:
        """Run the agent on every task of ``split`` (``train`` or ``eval``: the
        test split never enters a run's stages)."""
        if split not in ("train", "eval"):
            raise RunError(f"the {split} split is held out from a run's stages; evaluate on it with "
                           f"`brewkb eval --split {split}`")
        stage = "rollouts" if split == "train" else "rollouts-eval"
        if self._skip(stage):
            return self.run.read_trajectories(FILES[stage])
        started = time.monotonic()
        describe = getattr(self.env, "describe", None)
        if describe is not None:  # e.g. a seeded split over a dataset: recorded with the run
            self.run.set_manifest("environment", describe())
        jobs = rollouts.make_jobs(self.env.tasks(split) * repeats, self.provider(context, rev),
                                  retrieves_per_turn(self.agent))
        keys = [f"{j.task.id}#{n // max(1, len(jobs) // repeats)}" for n, j in enumerate(jobs)]
        done = self._partial(stage)
        todo = [(k, j) for k, j in zip(keys, jobs, strict=True) if k not in done]
        self.events(Event("stage_started", stage, done=len(done), total=len(jobs)))
        wins = sum(Trajectory.from_json(v).success is True for v in done.values())
        errors: list[str] = []

        def on_result(i: int, trajectory: Trajectory) -> None:
            nonlocal wins
            key = todo[i][0]
            error = episode_error(trajectory)
            if error is None:  # an episode that could not run is retried by the next run of the command
                self._record(stage, key, trajectory.to_json())
            else:
                errors.append(error)
            done[key] = trajectory.to_json()
            wins += trajectory.success is True
            self.events(Event("item_done", stage, done=len(done), total=len(jobs), successes=wins))

        await self.executor.run(self.agent, self.env, [j for _, j in todo], on_result)
        self._episodes_failed(stage, errors, len(todo))
        result = [Trajectory.from_json(done[k]) for k in keys]
        if (note := rollouts.degenerate_note(result)) is not None:
            self.events(Event("note", stage, message=note))
        self._finish(stage, (t.to_line() for t in result), started, context=context, rev=rev,
                     **rollouts.summarise(result))
        return result

    def trajectories(self) -> list[Trajectory]:
        """The run's train trajectories (rollouts or imported, its test tasks
        left out) plus relabelled ones."""
        base = self.run.read_trajectories(FILES["rollouts"])
        if not base:
            raise RunError(f"run {self.run.id} has no trajectories yet; run `brewkb rollout --run {self.run.id}` "
                           "or `brewkb import ... --run` first")
        return self._learnable(base) + self.run.read_trajectories(FILES["relabel"])

    def learned(self) -> list[Trajectory]:
        """The trajectories the run learns from: ``trajectories`` without the eval ones."""
        held = {t.id for t in self.run.read_trajectories(FILES["rollouts-eval"])}
        return [t for t in self.trajectories() if t.id not in held]

    @functools.cached_property
    def supported_calls(self) -> dict[str, frozenset[str]] | None:
        """For logs, the calls a recipe's line may make: the tools the learning
        conversations of ``stages.min_concept_tasks`` tasks called, with the
        arguments as many passed (``calls.supported_calls``); ``None`` (any)
        for a run of its own agent. Read once: the learning conversations are
        final once the stages that write them are done."""
        if self.run.ran_an_agent():
            return None
        learned = self.learned()
        return calls.supported_calls(learned, concepts_stage.tasks_of(learned), self.config.stages.min_concept_tasks)

    @functools.cached_property
    def log_texts(self) -> dict[str, list[str]]:
        """What others wrote in each learning conversation (``quote.read_texts``), by trajectory id: the
        integration screen drops a written line that reads as instructions and repeats any of it."""
        return {t.id: read_texts(t) for t in self.learned()}

    def _learnable(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        """``trajectories`` without the run's test tasks (logs held out for a
        PR's evidence, see ``brewkb.trajectories.split``): no stage reads them."""
        test = set(self.run.manifest().get("stages", {}).get("rollouts-eval", {}).get("test", []))
        return [t for t in trajectories if t.task_id not in test]

    def rubrics(self) -> list[Any]:
        """The behaviour rubrics the judge scores (``kb.rubric_file``, else the built-in ones)."""
        rubric_file = self.config.kb.rubric_file
        text = (self.kb.root / rubric_file).read_text(encoding="utf-8") if rubric_file else \
            grading.default_rubrics_text()
        rubrics = grading.parse_rubrics(text)
        if not rubrics:
            raise BrewError(f"{rubric_file or 'the default rubric file'} has no rubrics (`- `id`: text` lines)")
        return rubrics

    async def grades(self) -> dict[str, Any]:
        if self._skip("grades"):
            return _read_keyed(self.run.file(FILES["grades"]))
        started = time.monotonic()
        rubrics = self.rubrics()
        by_id = {t.id: t for t in self._learnable(self.run.read_trajectories(FILES["rollouts"]))}
        scrubber = scrubber_of(self.config.scrub)  # the judge reads no personal data, episodes of an environment too

        async def work(key: str) -> Any:
            return (await grading.judge(self.backend, by_id[key], rubrics, scrubber)).to_json()

        results = await self._map("grades", sorted(by_id), work)
        self._finish("grades", (json.dumps({"key": k, "value": v}, sort_keys=True) for k, v in results.items()),
                     started, graded=len(results), failed=sum("failed" in v for v in results.values()),
                     rubrics=[r.id for r in rubrics])
        return results

    async def outcomes(self) -> int:
        """The judge grades the logged trajectories whose outcome is unknown
        (with an LLM backend; the offline one cannot) and the run's rollouts get
        its verdicts. Returns how many outcomes are still unknown."""
        logged = self.run.read_trajectories(FILES["rollouts"])
        unknown = {t.id: t for t in logged if t.success is None}
        if self._skip("outcomes") or not unknown or self.config.llm.backend == "offline":
            return len(unknown)
        started = time.monotonic()
        scrubber = scrubber_of(self.config.scrub)
        verdicts = await self._map("outcomes", sorted(unknown),
                                   lambda key: grading.judge_outcome(self.backend, unknown[key], scrubber))
        self.run.write_trajectories(FILES["rollouts"], [grading.with_outcome(t, verdicts.get(t.id)) for t in logged])
        left = sum("failed" in v for v in verdicts.values())
        self._finish("outcomes", (json.dumps({"key": k, "value": v}, sort_keys=True) for k, v in verdicts.items()),
                     started, judged=len(verdicts) - left, unknown=left)
        return left

    async def relabel(self) -> list[Trajectory]:
        """Relabel failing train trajectories (as many as pass), re-run the
        agent on the relabelled tasks and grade them."""
        if self._skip("relabel"):
            return self.run.read_trajectories(FILES["relabel"])
        started = time.monotonic()
        if not self.config.stages.relabel:
            self._finish("relabel", [], started, relabelled=0, skipped_reason="stages.relabel is false")
            return []
        base = self._learnable(self.run.read_trajectories(FILES["rollouts"]))
        tasks = {t.id: t for t in self.env.tasks("train")}
        chosen = [t for t in relabel.select(base, self.config.stages.seed) if t.task_id in tasks]
        if not chosen:
            reason = (f"no failing trajectory of this run is a train task of environment {self.env.name!r}"
                      if base else "no trajectories")
            self._finish("relabel", [], started, relabelled=0, skipped_reason=reason)
            return []

        async def work(key: str) -> Any:
            source = next(t for t in chosen if t.id == key)
            task = await relabel.relabelled_task(self.backend, self.env, tasks[source.task_id], source)
            return {"task": None if task is None else {"id": task.id, "text": task.text, "data": dict(task.data)}}

        made = await self._map("relabel-tasks", [t.id for t in chosen], work)
        new = {key: Task(v["task"]["id"], v["task"]["text"], "train", v["task"]["data"])
               for key, v in made.items() if v.get("task")}
        done = self._partial("relabel")
        todo = [key for key in new if key not in done]
        provider = self.provider("kb", None)
        jobs = rollouts.make_jobs([new[key] for key in todo], provider, retrieves_per_turn(self.agent))

        errors: list[str] = []

        def on_result(i: int, trajectory: Trajectory) -> None:
            value = trajectory.derived(relabelled_from=todo[i]).to_json()  # the id covers the link to its source
            error = episode_error(trajectory)
            if error is None:
                self._record("relabel", todo[i], value)
            else:
                errors.append(error)
            done[todo[i]] = value

        await self.executor.run(self.agent, self.env, jobs, on_result)
        self._episodes_failed("relabel", errors, len(todo))
        out = [Trajectory.from_json(done[key]) for key in new]
        self._partial_path("relabel-tasks").unlink(missing_ok=True)
        passed = sum(t.success is True for t in out)
        self._finish("relabel", (t.to_line() for t in out), started, selected=len(chosen), relabelled=len(out),
                     unsupported=len(chosen) - len(new), passed=passed,
                     pass_rate=round(passed / len(out), 4) if out else None)
        return out

    async def reflections(self) -> tuple[list[Insight], list[Insight]]:
        """Insights of the train (and relabelled) trajectories, and of the eval rollouts."""
        if self._skip("reflections"):
            return _insights(self.run.file(FILES["reflections"]))
        started = time.monotonic()
        train = self.trajectories()
        evaluation = self.run.read_trajectories(FILES["rollouts-eval"])
        grades = _read_keyed(self.run.file(FILES["grades"])) if self.run.file(FILES["grades"]).exists() else {}
        by_id = {t.id: t.with_(rubric=grades.get(t.id, t.rubric)) for t in train + evaluation}
        eval_ids = {t.id for t in evaluation}
        # the reflector never reads personal data: what any trajectory of the run names is replaced in every one
        scrubber = scrubber_of(self.config.scrub).knowing(by_id.values())
        rubrics = self.rubrics()

        async def work(key: str) -> Any:
            # relabelled trajectories were never graded: the judge scores them here (eval rollouts only map concepts)
            trajectory = by_id[key] if key in eval_ids else await grading.judged(self.backend, by_id[key], rubrics,
                                                                                 scrubber)
            insights, bad = await reflect.reflect(self.backend, trajectory, self.config.stages.concepts_per_trajectory,
                                                  scrubber)
            return {"insights": [i.to_json() for i in insights], "rejected": bad}

        results = await self._map("reflections", sorted(by_id), work)
        lines = []
        for key, value in results.items():
            for insight in value.get("insights", []):
                lines.append(json.dumps({**insight, "split": "eval" if key in eval_ids else "train"}, sort_keys=True))
        n_train = sum(1 for k in results if k not in eval_ids)
        n_insights = sum(1 for line in lines if '"split": "train"' in line)
        per_traj = {k: len({i["concept"] for i in v.get("insights", [])}) for k, v in results.items()
                    if k not in eval_ids}
        self._finish("reflections", lines, started, trajectories=n_train, eval_trajectories=len(eval_ids),
                     insights=n_insights, failed=sum("failed" in v for v in results.values()),
                     rejected_concepts=sum(len(v.get("rejected", [])) for v in results.values()),
                     concepts_per_trajectory=round(sum(per_traj.values()) / len(per_traj), 3) if per_traj else 0)
        return _insights(self.run.file(FILES["reflections"]))

    async def concepts(self) -> list[Concept]:
        if self._skip("concepts"):
            return _concepts(self.run.file(FILES["concepts"]))
        started = time.monotonic()
        train, evaluation = await self.reflections()
        names = sorted({i.concept for i in train + evaluation})
        found: list[Concept] = []
        mapping: dict[str, str] = {}
        dropped: list[str] = []
        if names:
            vectors = await self.backend.embed(names)
            stages, learned = self.config.stages, self.learned()
            # logs (not this run's own agent on the configured tasks) need support: what the conversations did
            logs = not self.run.ran_an_agent()
            if logs and self.config.tools.signatures:
                for note in concepts_stage.known_notes(learned, self.config.tools.signatures):
                    self.events(Event("note", "concepts", message=note))
            found, mapping, dropped = concepts_stage.build_concepts(
                train, evaluation, names, vectors, stages.concept_threshold, stages.min_concept_insights,
                min_tasks=stages.min_concept_tasks if logs else 0, known=self.config.tools.signatures,
                actions=concepts_stage.actions_of(learned, self.config.tools.signatures),
                tasks=concepts_stage.tasks_of(learned),
                max_concepts=concepts_stage.concept_bound(len({t.task_id for t in learned}), stages.concepts_per_task)
                if logs else None)
        keep = found
        payload = {"concepts": [c.to_json() for c in keep], "mapping": mapping, "dropped": dropped}
        write_atomic(self.run.file(FILES["concepts"]), json.dumps(payload, indent=2, sort_keys=True) + "\n")
        seconds = round(time.monotonic() - started, 3)
        info = {"concepts": len(keep), "merged": sum(len(c.merged) for c in keep), "dropped": len(dropped),
                "names": len(names)}
        self.run.record_stage("concepts", seconds=seconds, **info)
        self.events(Event("stage_finished", "concepts", message=f"in {seconds:.1f} s", data=info))
        return keep

    async def integrate(self, samples: int = 1) -> list[Recipe]:
        if self._skip("integrate"):
            return [parse_recipe(json.loads(line)["text"])
                    for line in self.run.file(FILES["integrate"]).read_text().splitlines() if line.strip()]
        started = time.monotonic()
        concepts = await self.concepts()
        train, _ = await self.reflections()
        mapping = json.loads(self.run.file(FILES["concepts"]).read_text())["mapping"]
        current = {r.name: r for r in self.kb.recipes()} if self.kb.store.work_tree else {}
        by_slug = {c.slug: c for c in concepts}
        searched = None if self.run.ran_an_agent() else {c.slug for c in concepts if c.q_eval}
        supported = self.supported_calls

        async def work(slug: str) -> Any:
            c = by_slug[slug]
            mine = [i for i in train if mapping.get(i.concept) == slug]
            if searched is not None:  # logs: another write is named only when it is a concept searched too
                mine = concepts_stage.evidence(mine, mapping, searched, train)
            problems: list[str] = []
            made = await integrate.integrate(self.backend, slug, c.title, c.aliases, mine, current.get(slug),
                                             samples, self.config.stages.integrate_retries, errors=problems,
                                             known=self.config.tools.signatures, supported=supported,
                                             logs=self.log_texts)
            if not made:
                raise LLMError(f"no valid recipe for {slug} after {len(problems)} attempts; the last: "
                               f"{problems[-1] if problems else 'none'}")
            return {"text": render_recipe(made[0])}

        results = await self._map("integrate", sorted(by_slug), work)
        recipes = [parse_recipe(v["text"]) for v in results.values() if "text" in v]
        folder = self.run.file("recipes")
        folder.mkdir(exist_ok=True)
        for recipe in recipes:
            write_atomic(folder / f"{recipe.name}.md", render_recipe(recipe))
        self._finish("integrate", (json.dumps({"name": r.name, "text": render_recipe(r)}) for r in recipes), started,
                     recipes=len(recipes), failed=len(results) - len(recipes))
        return recipes


def _read_keyed(path: Path) -> dict[str, Any]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            out[record["key"]] = record["value"]
    return out


def _insights(path: Path) -> tuple[list[Insight], list[Insight]]:
    train: list[Insight] = []
    evaluation: list[Insight] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            split = data.pop("split", "train")
            (evaluation if split == "eval" else train).append(Insight.from_json(data))
    return train, evaluation


def _concepts(path: Path) -> list[Concept]:
    return [Concept.from_json(c) for c in json.loads(path.read_text(encoding="utf-8"))["concepts"]]

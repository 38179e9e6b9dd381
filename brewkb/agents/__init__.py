"""Agents, chosen by ``agent.name`` through an explicit registry, and the
executors that run their episodes (a local pool, or Ray).

It owns the agent protocol (``base``), the adapters (``external`` for a user's
program or Python function, ``tool_agent`` for the built-in tool-calling agent,
``oracle``), the tool channel an external agent reaches an episode's tools by
(``channel``), the user simulator role (``user_sim``) and the executors
(``executors``).

It may import environments, retrieval (to render an agent's context), the LLM
layer, isolation and trajectories; never the stages, the search or runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from brewkb.config import Config
from brewkb.errors import AgentError, ConfigError

__all__ = ["AGENTS", "check_agent_name", "load_agent"]


def _command(config: Config, root: Path, client: Any) -> Any:
    from brewkb.agents.external import CommandAgent

    a = config.agent
    return CommandAgent(a.command, timeout=a.timeout, max_output=a.max_output_bytes, cwd=root)


def _python(config: Config, root: Path, client: Any) -> Any:
    from brewkb.agents.external import PythonAgent

    return PythonAgent(config.agent.entry, timeout=config.agent.timeout, root=root)


def _tool_agent(config: Config, root: Path, client: Any) -> Any:
    from brewkb.agents.tool_agent import ToolAgent

    if client is None:
        raise AgentError('the tool-agent needs an LLM: set llm.backend = "openai" and an endpoint '
                         "(see docs/llm.md), or choose another agent")
    return ToolAgent(client, max_steps=config.agent.max_steps, per_turn=config.retrieval.per_turn)


def _shop_scripted(config: Config, root: Path, client: Any) -> Any:
    from brewkb.envs.shop.agent import ScriptedAgent

    return ScriptedAgent(seed=config.agent.seed, max_steps=config.agent.max_steps)


def _oracle(config: Config, root: Path, client: Any) -> Any:
    from brewkb.agents.oracle import OracleAgent

    return OracleAgent()


AGENTS: dict[str, Callable[[Config, Path, Any], Any]] = {
    "shop-scripted": _shop_scripted,
    "command": _command,
    "python": _python,
    "tool-agent": _tool_agent,
    "oracle": _oracle,
}


def check_agent_name(name: str) -> None:
    if name not in AGENTS:
        raise ConfigError(f"agent.name: unknown agent {name!r}; choose one of {sorted(AGENTS)}")


def load_agent(config: Config, root: Path, client: Any = None) -> Any:
    """The configured agent; ``client`` is the LLMClient when an LLM backend is set."""
    check_agent_name(config.agent.name)
    return AGENTS[config.agent.name](config, root, client)

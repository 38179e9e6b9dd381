"""Environments, chosen by ``env.name`` through an explicit registry: tasks
by split and their grader (the shop simulation, τ²-bench, SpreadsheetBench, a
tasks file).

It may import the LLM layer (the shop's scripted agent reads recipes with the
offline rules), isolation and trajectories; never agents, stages or the search.
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any

from brewkb.config import AgentConfig, EnvConfig
from brewkb.envs.base import Environment, Task
from brewkb.errors import ConfigError

__all__ = ["ENVIRONMENTS", "VARIANTS", "load_environment", "Environment", "Task"]

ENVIRONMENTS: dict[str, str] = {
    "shop": "brewkb.envs.shop:ShopEnvironment",
    "spreadsheetbench": "brewkb.envs.spreadsheetbench:SpreadsheetBench",
    "tasks-file": "brewkb.envs.tasks_file:TasksFileEnvironment",
    "tau2": "brewkb.envs.tau2:Tau2Environment",
}

VARIANTS: dict[str, str] = {"tau2": "domain"}
"""Environments whose ``env.name`` may carry a variant (``tau2:airline``), and
the ``env.options`` key the variant sets."""


def load_environment(config: EnvConfig, root: Path, agent: AgentConfig | None = None) -> Environment:
    name, _, variant = config.name.partition(":")
    if variant and name in VARIANTS:
        config = dataclasses.replace(config, name=name, options={**config.options, VARIANTS[name]: variant})
    if config.name not in ENVIRONMENTS:
        raise ConfigError(f"env.name: unknown environment {config.name!r}; choose one of {sorted(ENVIRONMENTS)}")
    module, attr = ENVIRONMENTS[config.name].split(":")
    cls: Any = getattr(importlib.import_module(module), attr)
    options = dict(config.options)
    if config.name == "tasks-file":
        grader = options.get("grader") or []
        return cls(root / config.data, grader, timeout=float(options.get("timeout", 120.0)))  # type: ignore[no-any-return]
    return cls.from_config(config, root)  # type: ignore[no-any-return]

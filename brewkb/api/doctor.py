"""``doctor``: probe the endpoint of every role the configured run would call."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.config import Config
from brewkb.envs import load_environment
from brewkb.kb import KB

__all__ = ["DoctorResult", "doctor", "roles_in_use"]


@dataclass(frozen=True)
class DoctorResult:
    backend: str
    roles: tuple[Any, ...]
    """One ``brewkb.llm.doctor.RoleReport`` per role in use."""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.roles)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": self.ok, "roles": [r.to_json() for r in self.roles]}


def roles_in_use(config: Config, conversational: bool = False) -> list[str]:
    """The LLM roles a ``refine`` with this config calls; ``conversational``:
    the environment's user is simulated (τ²), which the tool agent asks the
    ``user`` role to play."""
    roles = ["reflector", "integrator", "judge", "embeddings"]
    if config.stages.relabel:
        roles.insert(2, "relabeller")
    if config.agent.name == "tool-agent":
        roles[:0] = ["agent", "user"] if conversational else ["agent"]
    return roles


def doctor(*, long_prompt: int = 6000, start: Path = Path("."),
           environ: Mapping[str, str] | None = None) -> DoctorResult:
    """Probe each role's endpoint (a few small calls each, one long prompt per
    endpoint and model); nothing is cached or recorded in a run."""
    from brewkb.llm.client import LLMClient
    from brewkb.llm.doctor import diagnose

    with KB.open(start) as kb:
        config = kb.config
        if config.llm.backend == "offline":
            return DoctorResult("offline", ())
        env = load_environment(config.env, kb.root) if config.agent.name == "tool-agent" else None
        conversational = hasattr(env, "user_prompt")
        user = _user_probe(env) if conversational else None
    variables = dict(os.environ if environ is None else environ)
    # one retry: the doctor should answer in seconds even when a server is down
    llm = dataclasses.replace(config.llm, max_retries=min(config.llm.max_retries, 1))
    client = LLMClient(llm, cache=None, environ=variables)

    async def run() -> list[Any]:
        try:
            return await diagnose(client, roles_in_use(config, conversational),
                                  key_present=bool(variables.get(llm.api_key_env)), long_prompt=long_prompt,
                                  user=user)
        finally:
            await client.aclose()

    return DoctorResult(config.llm.backend, tuple(asyncio.run(run())))


def _user_probe(env: Any) -> tuple[str, str] | None:
    """The environment's user prompt for its first task and its agent's
    greeting: the user role is probed as a run would use it."""
    for split in ("train", "test", "eval"):
        tasks = env.tasks(split)
        if tasks:
            return env.user_prompt(tasks[0]), getattr(env, "greeting", "Hi! How can I help you today?")
    return None

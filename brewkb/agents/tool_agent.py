"""The built-in OpenAI tool-calling agent.

System prompt plus the rendered KB context, the task as the user's message,
the environment's tool schemas. One tool call is executed per turn (extra
calls in the same turn are answered with an error asking to call them again);
the episode ends at a reply without tool calls, when the environment says it
is over, or at the step budget. Every message is recorded.

In a conversational environment (one with ``user_prompt``, e.g. τ²) the
agent's system prompt carries the environment's ``policy``, the conversation
opens with the environment's ``greeting``, the user's turns come from the
``user`` LLM role (``UserSimulator``), and a reply without tool calls goes to
the user instead of ending the episode; the user's stop ends it. An empty
reply from either model fails the episode.

A model that writes its tool call in the reply's text (a fenced or bare JSON
object with ``name`` and ``arguments``, Hermes/Qwen ``<tool_call>`` tags)
gets it executed as a call; ``meta["calls_from_text"]`` counts them and the
ledger records those replies in mode ``text_tools``. Text shaped like a call
that is not one (it does not parse, or names a tool the episode does not
offer) is neither a call nor an answer: the episode fails with that error.
``meta["tools"]`` lists the tools offered. A conversation whose user never
states a request, or whose turns repeat, is marked ``meta["degenerate"]``
(``brewkb.llm.turns``).

With ``retrieval.per_turn`` the episode gets a ``retriever``: after each user
turn the agent answers, the recipe block of its system prompt is retrieved
again with the user's turns so far as the query, and ``meta["retrievals"]``
records each turn's query and recipes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from brewkb.agents.user_sim import UserSimulator
from brewkb.envs.base import Environment, Task
from brewkb.errors import AgentError
from brewkb.llm.client import LLMClient
from brewkb.llm.replies import short
from brewkb.llm.turns import degenerate
from brewkb.trajectories.schema import Outcome, Trajectory

if TYPE_CHECKING:
    from brewkb.retrieval.context import ContextProvider

__all__ = ["ToolAgent", "SYSTEM_PROMPT"]

SYSTEM_PROMPT = (
    "You are an agent that completes the user's task with the tools provided. Make one tool call at a "
    "time and wait for its result. Follow the policies the tools enforce. When the task is done, or "
    "cannot be done, answer the user without calling a tool."
)


def _system(head: str, context: str) -> dict[str, Any]:
    return {"role": "system", "content": head + (f"\n\n{context}" if context else "")}


class ToolAgent:
    name = "tool-agent"
    retrieves_per_step = False

    def __init__(self, client: LLMClient, *, max_steps: int = 30, system_prompt: str = SYSTEM_PROMPT,
                 per_turn: bool = False) -> None:
        self.client = client
        self.max_steps = max_steps
        self.system_prompt = system_prompt
        self.retrieves_per_turn = per_turn

    async def aclose(self) -> None:
        """Release the client's connections (awaited once, on the loop that used them)."""
        await self.client.aclose()

    async def arun(self, task: Task, context: str, env: Environment,
                   retriever: ContextProvider | None = None) -> Trajectory:
        session = env.session(task)
        tools = env.tools()
        user = (UserSimulator(self.client, env.user_prompt(task), env.user_markers)  # type: ignore[attr-defined]
                if hasattr(env, "user_prompt") else None)
        policy = getattr(env, "policy", "")
        head = self.system_prompt + (f"\n\n{policy}" if policy else "")
        messages: list[dict[str, Any]] = [_system(head, context)]
        usage = {"calls": 0, "tokens_in": 0, "tokens_out": 0}
        meta: dict[str, Any] = {"tools": [str((t.get("function") or {}).get("name")) for t in tools]}
        retrievals: list[dict[str, Any]] = []

        def heard(turn: str) -> None:
            """Append a user turn (without the markers that end a conversation;
            a turn of nothing else is not one); unless it ends the conversation,
            retrieve again when per turn."""
            recorded = user.said(turn) if user is not None else turn
            if recorded:
                messages.append({"role": "user", "content": recorded})
            if user is not None and user.ends(turn):
                meta["ended_by"] = "user"
            elif retriever is not None:
                said = [str(m["content"]) for m in messages if m["role"] == "user"]
                query = "\n".join(said)
                text, use = retriever.context(query)
                messages[0] = _system(head, text)
                retrievals.append({"turn": len(said) - 1, "query": query, "recipes": list(use.recipes)})

        if user is None:
            messages.append({"role": "user", "content": task.text})
        else:
            messages.append({"role": "assistant", "content": getattr(env, "greeting", "Hi! How can I help you today?")})
            heard(await user.reply(messages))
        for _ in range(self.max_steps):
            if meta.get("ended_by"):
                break
            result, problem = await self.client.reply(self.client.request("agent", messages, tools=tools))
            usage["calls"] += 1
            usage["tokens_in"] += result.tokens_in
            usage["tokens_out"] += result.tokens_out
            if not result.tool_calls and not result.content.strip():
                raise AgentError("the agent's model sent an empty reply")
            if problem is not None and not result.tool_calls:
                raise AgentError(f"the agent's reply is neither a tool call nor an answer: {problem}: "
                                 f"{short(result.content, 160)!r}")
            if result.from_text:
                meta["calls_from_text"] = meta.get("calls_from_text", 0) + 1
            messages.append(result.message())
            if not result.tool_calls:
                if user is None:
                    break
                heard(await user.reply(messages))
                continue
            first, *rest = result.tool_calls
            messages.append(self._execute(session, first))
            for extra in rest:
                messages.append({"role": "tool", "tool_call_id": extra.get("id", ""),
                                 "name": extra["function"]["name"],
                                 "content": "Error: one tool call at a time; call it again after this one."})
            if getattr(session, "done", False):
                break
        else:
            meta["stopped"] = f"step budget of {self.max_steps} reached"
        if user is not None:
            meta["user"] = {"calls": user.calls, "tokens_in": user.tokens_in, "tokens_out": user.tokens_out}
            said = lambda role: [str(m["content"]) for m in messages[2:]  # noqa: E731 - after the greeting
                                 if m["role"] == role and m.get("content") and not m.get("tool_calls")]
            why = degenerate(said("user"), said("assistant"))
            if why is not None:
                meta["degenerate"] = why
        if retriever is not None and user is not None:
            meta["retrievals"] = retrievals
        return Trajectory(task_id=task.id, task=task.text, split=task.split, messages=tuple(messages),
                          outcome=Outcome(False, 0.0), usage=usage, meta=meta)

    @staticmethod
    def _execute(session: Any, call: Mapping[str, Any]) -> dict[str, Any]:
        name = call["function"]["name"]
        try:
            args = json.loads(call["function"].get("arguments") or "{}")
        except json.JSONDecodeError as exc:
            content = f"Error: the arguments are not valid JSON ({exc.msg}); call the tool again."
        else:
            content = (session.call(name, args) if isinstance(args, dict)
                       else "Error: the arguments must be a JSON object.")
        return {"role": "tool", "tool_call_id": call.get("id", ""), "name": name, "content": content}

"""Structured-output fallbacks: json_schema → json_object + schema in the
prompt → plain text parsed, through the real SDK against fake servers (a whole
refine through the fallback is in test_budget.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from brewkb.config import LLMConfig, RoleConfig, RolesConfig
from brewkb.llm.client import JSONReply, LLMClient
from brewkb.llm.ledger import Ledger
from brewkb.llm.structured import extract_json
from tests.fakes import servers
from tests.fakes.openai_server import FakeOpenAI

SCHEMA = {"type": "object", "required": ["answer"], "additionalProperties": False,
          "properties": {"answer": {"type": "integer"}}}
USER = [{"role": "system", "content": "You count."}, {"role": "user", "content": "What is six times seven?"}]


def ask(fake: FakeOpenAI, times: int = 1, **config: Any) -> tuple[list[JSONReply], LLMClient]:
    client = LLMClient(LLMConfig(backend="openai", base_url=fake.base_url, max_retries=0,
                                 **{"model": "gpt-4o-mini", **config}),
                       ledger=Ledger(), environ={})

    async def go() -> list[JSONReply]:
        try:
            return [await client.complete_json(client.request("judge", USER, schema=SCHEMA)) for _ in range(times)]
        finally:
            await client.aclose()

    return asyncio.run(go()), client


def formats(fake: FakeOpenAI) -> list[str | None]:
    return [(b.get("response_format") or {}).get("type") for p, b in fake.requests if p.endswith("/completions")]


def test_rejected_json_schema_falls_back_to_json_object_and_stays_there() -> None:
    with servers.llamacpp_python() as fake:
        replies, client = ask(fake, times=2)
    assert [r.value for r in replies] == [{"answer": 42}, {"answer": 42}]
    assert [r.mode for r in replies] == ["json_object", "json_object"]
    assert formats(fake) == ["json_schema", "json_object", "json_object"]  # the second item asks in json_object
    sent = fake.requests[1][1]
    assert sent["response_format"]["schema"] == SCHEMA
    assert sent["messages"][0]["content"].startswith("You count.\n\nJSON mode is on")
    assert [(e.mode, e.error is not None) for e in client.ledger.entries] == [
        ("json_schema", True), ("json_object", False), ("json_object", False)]


def test_a_server_without_response_format_gets_the_schema_in_the_prompt_and_prose_is_cut_away() -> None:
    answer = servers.responder(prose_around_json=True)

    def plain_only(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("response_format"):
            return {"status": 400, "message": "response_format is not supported"}
        return answer(body)

    with FakeOpenAI(default=plain_only) as fake:
        replies, client = ask(fake)
    assert replies[0].value == {"answer": 42} and replies[0].mode == "text"
    assert formats(fake) == ["json_schema", "json_object", None]
    assert "matches this JSON Schema" in fake.requests[2][1]["messages"][0]["content"]
    assert [e.mode for e in client.ledger.entries] == ["json_schema", "json_object", "text"]


def test_a_pinned_mode_does_not_fall_back_and_says_how_to_allow_it() -> None:
    with servers.llamacpp_python() as fake:
        replies, _ = ask(fake, structured_output="json_schema")
    assert replies[0].error is not None and not replies[0].ok
    assert "rejects response_format json_schema" in replies[0].error
    assert 'llm.structured_output = "auto"' in replies[0].error
    assert formats(fake) == ["json_schema"]


def test_a_role_can_pin_its_own_mode() -> None:
    roles = RolesConfig(judge=RoleConfig(structured_output="text"))
    with servers.vllm() as fake:
        replies, _ = ask(fake, roles=roles)
    assert replies[0].value == {"answer": 42} and formats(fake) == [None]


def test_unrelated_errors_do_not_change_the_mode() -> None:
    with FakeOpenAI() as fake:
        fake.reply({"status": 400, "message": "context length exceeded"}, {"content": '{"answer": 1}'})
        replies, _ = ask(fake, times=2)
    assert "context length exceeded" in (replies[0].error or "")
    assert replies[1].value == {"answer": 1} and formats(fake) == ["json_schema", "json_schema"]


def test_extract_json_cuts_fences_and_prose() -> None:
    assert extract_json('```json\n{"a": [1]}\n```') == '{"a": [1]}'
    assert extract_json('Sure! {"a": {"b": 2}} Hope it helps.') == '{"a": {"b": 2}}'
    assert extract_json("[1, 2] done") == "[1, 2]"
    assert extract_json("no json here") == "no json here"

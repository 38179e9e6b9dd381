from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brewkb.config import LLMConfig, RoleConfig, RolesConfig
from brewkb.errors import LLMError
from brewkb.llm.cache import ResponseCache
from brewkb.llm.client import LLMClient
from brewkb.llm.ledger import Ledger, read_ledger, summarise
from brewkb.llm.schema import validate
from tests.conftest import MakeRepo
from tests.fakes.openai_server import FakeOpenAI

SCHEMA = {"type": "object", "required": ["answer"], "additionalProperties": False,
          "properties": {"answer": {"type": "integer", "minimum": 0}}}
USER = [{"role": "user", "content": "What is six times seven?"}]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def client_for(fake: FakeOpenAI, tmp_path: Path | None = None, **config: Any) -> LLMClient:
    cfg = LLMConfig(backend="openai", base_url=fake.base_url, **{"model": "gpt-4o-mini", **config})
    cache = ResponseCache(tmp_path / "cache.sqlite") if tmp_path else None
    ledger = Ledger(tmp_path / "ledger.jsonl") if tmp_path else Ledger()
    return LLMClient(cfg, cache=cache, ledger=ledger, environ={"OPENAI_API_KEY": "sk-test-SECRET-0042"})


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _chat(client: LLMClient, role: str = "reflector", sample: int = 0, **kw: Any) -> Any:
    try:
        return await client.chat(client.request(role, USER, sample=sample, **kw))
    finally:
        await client.aclose()


def test_retries_on_429_and_500_then_succeeds(fake: FakeOpenAI) -> None:
    fake.reply({"status": 429, "headers": {"retry-after": "0.01"}}, {"status": 500}, {"content": "42"})
    client = client_for(fake, max_retries=3)
    result = run(_chat(client))
    assert result.content == "42" and not result.cached
    assert fake.count == 3
    assert [e.error for e in client.ledger.entries] == [None]


def test_errors_after_retries_become_llm_errors(fake: FakeOpenAI) -> None:
    fake.reply(*[{"status": 500, "message": "overloaded"}] * 2)
    client = client_for(fake, max_retries=1)
    with pytest.raises(LLMError, match="answered HTTP 500: overloaded"):
        run(_chat(client))
    assert fake.count == 2
    assert client.ledger.entries[0].error is not None


def test_timeout(fake: FakeOpenAI) -> None:
    fake.reply({"delay": 2.0, "content": "late"})
    client = client_for(fake, timeout=0.3, max_retries=0)
    with pytest.raises(LLMError, match="timed out after 0.3 s"):
        run(_chat(client))


def test_empty_choices_and_truncated_bodies(fake: FakeOpenAI) -> None:
    fake.reply({"choices": []})
    with pytest.raises(LLMError, match="returned no choices"):
        run(_chat(client_for(fake, max_retries=0)))
    fake.reply({"raw": '{"id": "x", "choices": [{"mess'})
    with pytest.raises(LLMError, match="unreadable reply"):
        run(_chat(client_for(fake, max_retries=0)))


def test_tool_calls_come_back_in_openai_shape(fake: FakeOpenAI) -> None:
    fake.reply({"tool_calls": [{"id": "c1", "name": "find_customer", "arguments": {"email": "a@b.c"}}]})
    tools = [{"type": "function", "function": {"name": "find_customer", "parameters": {"type": "object"}}}]
    result = run(_chat(client_for(fake), role="agent", tools=tools))
    assert result.tool_calls[0]["function"] == {"name": "find_customer", "arguments": '{"email": "a@b.c"}'}
    assert result.message()["tool_calls"][0]["id"] == "c1"
    assert fake.requests[0][1]["tools"] == tools


def test_invalid_json_is_repaired_once(fake: FakeOpenAI) -> None:
    fake.reply({"content": "forty-two"}, {"content": '{"answer": 42}'})
    client = client_for(fake)

    async def go() -> Any:
        reply = await client.complete_json(client.request("reflector", USER, schema=SCHEMA))
        await client.aclose()
        return reply

    reply = run(go())
    assert reply.ok and reply.value == {"answer": 42} and reply.calls == 2
    repair = fake.requests[1][1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "forty-two"}
    assert "not JSON" in repair[-1]["content"]
    assert fake.requests[0][1]["response_format"]["json_schema"]["schema"] == SCHEMA


def test_second_invalid_reply_is_a_typed_failure(fake: FakeOpenAI) -> None:
    fake.reply({"content": "{"}, {"content": '{"answer": -1, "extra": true}'})
    client = client_for(fake)

    async def go() -> Any:
        reply = await client.complete_json(client.request("judge", USER, schema=SCHEMA))
        await client.aclose()
        return reply

    reply = run(go())
    assert not reply.ok and reply.value is None
    assert "below the minimum 0" in reply.error and "unexpected key 'extra'" in reply.error
    assert fake.count == 2


def test_warm_cache_replays_with_zero_requests(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.default = lambda body: {"content": json.dumps({"answer": len(json.dumps(body["messages"]))})}

    async def session() -> list[Any]:
        client = client_for(fake, tmp_path)
        out = [await client.chat(client.request("agent", USER)),
               (await client.complete_json(client.request("reflector", USER, schema=SCHEMA))).value,
               await client.embed(["cancel order", "book flight"])]
        await client.aclose()
        return out

    posts = lambda: sum(1 for path, _ in fake.requests if not path.endswith("/models"))  # noqa: E731
    cold = run(session())
    paid = posts()
    assert paid == 3
    warm = run(session())
    assert posts() == paid  # the server saw nothing new but its list of models
    assert warm[0].content == cold[0].content and warm[0].cached
    assert warm[1:] == cold[1:]


def test_samples_at_temperature_are_distinct_entries(fake: FakeOpenAI, tmp_path: Path) -> None:
    client = client_for(fake, tmp_path)

    async def go() -> None:
        for sample in (0, 1, 2, 2, 1):
            await client.chat(client.request("integrator", USER, sample=sample))
        await client.aclose()

    run(go())
    assert fake.count == 3
    assert [r[1]["temperature"] for r in fake.requests] == [0.7, 0.7, 0.7]
    assert len({r[1]["seed"] for r in fake.requests}) == 3
    assert client.cache is not None and client.cache.stats().entries == 3


def test_ledger_totals_match_the_server(fake: FakeOpenAI, tmp_path: Path) -> None:
    client = client_for(fake, tmp_path)

    async def go() -> None:
        for n, role in enumerate(("agent", "agent", "reflector")):
            await client.chat(client.request(role, USER + [{"role": "user", "content": role * n}]))
        await client.chat(client.request("reflector", USER + [{"role": "user", "content": "reflector" * 2}]))
        await client.aclose()

    run(go())
    totals = summarise(read_ledger(tmp_path / "ledger.jsonl"), {"gpt-4o-mini": _price(1.0, 2.0)})
    chat_requests = [b for p, b in fake.requests if p.endswith("/chat/completions")]
    assert totals["agent"].calls == 2 and totals["reflector"].calls == 2 and totals["reflector"].cached == 1
    assert sum(t.calls - t.cached for t in totals.values()) == len(chat_requests) == 3
    expected_in = sum(len(json.dumps(b["messages"]).split()) for b in chat_requests)
    assert sum(t.tokens_in for t in totals.values()) == expected_in
    assert totals["agent"].cost == pytest.approx((totals["agent"].tokens_in * 1 + totals["agent"].tokens_out * 2) / 1e6)


def _price(i: float, o: float) -> Any:
    from brewkb.config import Price

    return Price(input=i, output=o)


def test_no_api_key_reaches_any_file(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.reply({"status": 500}, {"content": "ok"})
    client = client_for(fake, tmp_path, max_retries=1)
    run(_chat(client))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"cache.sqlite", "ledger.jsonl"}
    for path in files:
        assert b"SECRET-0042" not in path.read_bytes(), path


def test_each_role_can_have_its_own_endpoint(fake: FakeOpenAI) -> None:
    with FakeOpenAI() as other:
        roles = RolesConfig(agent=RoleConfig(model="agent-model", base_url=other.base_url))
        client = client_for(fake, roles=roles)

        async def go() -> None:
            await client.chat(client.request("agent", USER))
            await client.chat(client.request("reflector", USER))
            await client.aclose()

        run(go())
        assert other.count == 1 and other.requests[0][1]["model"] == "agent-model"
        assert fake.count == 1 and fake.requests[0][1]["model"] == "gpt-4o-mini"


def test_a_missing_key_is_explained() -> None:
    client = LLMClient(LLMConfig(backend="openai"), environ={})
    with pytest.raises(LLMError, match="no API key: set OPENAI_API_KEY"):
        run(_chat(client))


def test_openai_is_imported_lazily() -> None:
    code = ("import sys; import brewkb.llm.client, brewkb.llm.llm_roles, brewkb.cli.main; "
            "print('openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(
    ("value", "errors"),
    [
        ({"answer": 3}, []),
        ({"answer": 3.0}, []),
        ({"answer": True}, ["$.answer: expected integer, got bool"]),
        ({}, ["$: missing required key 'answer'"]),
        ([1], ["$: expected object, got list"]),
    ],
)
def test_schema_validator(value: Any, errors: list[str]) -> None:
    assert validate(value, SCHEMA) == errors


def test_cache_and_ledger_commands(tmp_path: Path, make_repo: MakeRepo) -> None:
    root = make_repo({"brewkb.toml": "[llm.prices.gpt-4o-mini]\ninput = 1000000.0\n", "recipes/.gitkeep": ""})
    from brewkb.llm import cache_path

    cache = ResponseCache(cache_path(root / ".brewkb"))
    cache.put('{"a": 1}', "chat", '{"content": "x"}')
    cache.put('{"a": 2}', "embedding", "[0.1]")
    cache.close()
    run = root / "runs" / "r1"
    ledger = Ledger(run / "ledger.jsonl")
    from brewkb.llm.ledger import LedgerEntry

    ledger.record(LedgerEntry("reflector", "gpt-4o-mini", tokens_in=3, tokens_out=1))
    ledger.record(LedgerEntry("reflector", "gpt-4o-mini", tokens_in=3, tokens_out=1, cached=True))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=root, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)

    stats = json.loads(cli("cache", "stats", "--json").stdout)
    assert stats["entries"] == 2 and stats["by_kind"] == {"chat": 1, "embedding": 1}
    unconfirmed = cli("cache", "clear")  # stdin is not a terminal: nothing is deleted, and it says how to confirm
    assert unconfirmed.returncode == 2 and "pass --yes" in unconfirmed.stderr
    assert cli("cache", "clear", "--yes").stdout.strip() == "Deleted 2 entries."
    assert json.loads(cli("cache", "stats", "--json").stdout)["entries"] == 0
    totals = json.loads(cli("ledger", "r1", "--json").stdout)
    assert totals["reflector"]["calls"] == 2 and totals["reflector"]["cached"] == 1
    assert totals["reflector"]["cost"] == pytest.approx(3.0)  # only the paid call: 3 tokens at $1 each
    assert "no run 'nope'" in cli("ledger", "nope").stderr


def test_only_good_replies_are_cached(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.reply({"content": ""}, {"content": "not json"}, {"content": '{"answer": -1}'}, {"content": '{"answer": 42}'})
    client = client_for(fake, tmp_path)

    async def go() -> tuple[Any, Any, Any]:
        try:
            empty = await client.chat(client.request("agent", USER))
            reply = await client.complete_json(client.request("reflector", USER, schema=SCHEMA))
            again = await client.complete_json(client.request("reflector", USER, schema=SCHEMA))
            return empty, reply, again
        finally:
            await client.aclose()

    empty, reply, again = run(go())
    assert empty.content == "" and not reply.ok and "returned an invalid reply, also after one repair" in reply.error
    assert again.value == {"answer": 42} and fake.count == 4  # nothing bad was replayed from the cache
    errors = [e.error for e in read_ledger(tmp_path / "ledger.jsonl")]
    assert errors[0] == "invalid reply: the reply is empty"
    assert errors[1].startswith("invalid reply: it is not JSON") and errors[2].startswith("invalid reply: $.answer")
    assert errors[3] is None
    assert client.cache is not None and client.cache.stats().entries == 1


def test_a_reply_nested_deeper_than_any_schema_is_invalid_not_a_crash(fake: FakeOpenAI, tmp_path: Path) -> None:
    deep = '{"answer": ' + "[" * 200_000 + "]" * 200_000 + "}"  # past the interpreter's recursion limit
    fake.reply({"content": deep}, {"content": '{"answer": ' + "[" * 40 + "]" * 40 + "}"})
    client = client_for(fake, tmp_path)

    async def go() -> Any:
        try:
            return await client.complete_json(client.request("reflector", USER, schema=SCHEMA))
        finally:
            await client.aclose()

    reply = run(go())
    assert not reply.ok and "returned an invalid reply, also after one repair" in reply.error
    errors = [e.error for e in read_ledger(tmp_path / "ledger.jsonl")]
    assert errors == ["invalid reply: it nests more than 32 levels deep"] * 2


def test_the_cache_key_includes_the_endpoint(tmp_path: Path) -> None:
    with FakeOpenAI(default={"content": "from a"}) as a, FakeOpenAI(default={"content": "from b"}) as b:
        first = run(_chat(client_for(a, tmp_path)))
        second = run(_chat(client_for(b, tmp_path)))
        replay = run(_chat(client_for(a, tmp_path)))
    assert (first.content, second.content, replay.content) == ("from a", "from b", "from a")
    assert (a.count, b.count, replay.cached) == (1, 1, True)


def test_cache_clear_by_run_and_by_role(make_repo: MakeRepo) -> None:
    root = make_repo({"brewkb.toml": "", "recipes/.gitkeep": ""})
    (root / "runs" / "a").mkdir(parents=True)
    from brewkb.api.llm import cache_clear, cache_stats
    from brewkb.errors import ConfigError, RunError
    from brewkb.llm import cache_path

    for run_id, role, key in [("a", "judge", "1"), ("a", "reflector", "2"), ("b", "judge", "3"), ("b", "agent", "4")]:
        cache = ResponseCache(cache_path(root / ".brewkb"), run=run_id)
        cache.put(key, "chat", "{}", role)
        cache.close()
    ResponseCache(cache_path(root / ".brewkb"), run="b").get("2")  # b replayed one of a's replies
    assert cache_stats(start=root).by_role == {"agent": 1, "judge": 2, "reflector": 1}
    with pytest.raises(ConfigError, match="roles are agent, reflector"):
        cache_clear(role="juge", start=root)
    with pytest.raises(RunError, match="no run 'nope'"):
        cache_clear(run="nope", start=root)

    def cli(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "brewkb", "cache", "clear", *args, "--yes"], cwd=root,
                              capture_output=True, text=True).stdout.strip()

    assert cli("--role", "judge", "--run", "a") == "Deleted 1 entries."
    assert cli("--run", "a") == "Deleted 1 entries."  # key 2, b's use of it included
    assert cache_stats(start=root).by_role == {"agent": 1, "judge": 1}
    assert cache_clear(role="agent", start=root) == 1 and cache_stats(start=root).entries == 1


def test_the_sdk_sends_through_its_aiohttp_transport(fake: FakeOpenAI) -> None:
    import openai

    client = client_for(fake)

    async def transport() -> Any:
        try:
            await client.chat(client.request("reflector", USER))
            return client._clients[fake.base_url]._client  # the SDK's HTTP client
        finally:
            await client.aclose()

    assert isinstance(run(transport()), openai.DefaultAioHttpClient)
    assert fake.count == 1

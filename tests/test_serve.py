"""``brewkb serve`` through the real CLI and real HTTP: the server runs as a
subprocess in front of the fake upstream, and agents written against the
``openai`` SDK talk to it with nothing changed but their base URL."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import git, told_from
from tests.fakes.openai_server import FakeOpenAI
from tests.test_distill import PERSONAL, conversation

pytestmark = pytest.mark.xdist_group("serve")

KEY = "sk-brewkb-serve-test-7f3a9c1e"
SYSTEM = "You help customers of a shop."
TOOLS = [{"type": "function", "function": {
    "name": "find_order", "description": "Look an order up.",
    "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}}}}]
RECIPE = """---
name: cancel-order
description: 'Cancel an order the customer no longer wants. Requests such as: "I do not need it anymore"'
---

## When to use

The customer wants an order cancelled. For example (personal data replaced):

- "Please cancel my order, I do not need it anymore."

## How to perform

1. `find_order(ref)`
2. Cancel it.
"""
SCRIPTS: dict[str, list[dict[str, Any]]] = {}
"""First user message -> the assistant messages of a scripted conversation."""


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """The upstream: a scripted conversation's next message, else an agent that
    looks the order up once and answers, naming the conversation's marker."""
    messages = body["messages"]
    first = next(m["content"] for m in messages if m["role"] == "user")
    if first in SCRIPTS:
        message = SCRIPTS[first][sum(m["role"] == "assistant" for m in messages)]
        calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                 for c in message.get("tool_calls") or []]
        return {"content": message["content"], "tool_calls": calls} if calls else {"content": message["content"]}
    marker = re.search(r"\[(\w+)\]", first)
    tag = marker.group(1) if marker else "none"
    if tag == "busy":
        return {"status": 429, "message": "slow down", "headers": {"retry-after": "7"}}
    if tag == "stall":
        return {"delay": 1.5, "content": "late"}
    if tag in ("slow", "long"):
        return {"content": " ".join(f"word{i}" for i in range(12 if tag == "slow" else 60)), "chunk_delay": 0.05}
    if messages[-1]["role"] == "tool":
        return {"content": f"Order {tag} is cancelled."}
    # the order the tool is given is an id (scrubbed wherever it appears); the marker in the user's words is not
    return {"tool_calls": [{"id": f"call-{tag}", "name": "find_order", "arguments": {"ref": f"R{tag}"}}]}


def environment(home: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "BREWKB_LOG_DIR": str(home / "logs"),
           "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com", "GIT_COMMITTER_NAME": "Test",
           "GIT_COMMITTER_EMAIL": "test@example.com"}
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    return env


def brewkb(kb: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=kb, capture_output=True, text=True, env=env)


def make_kb(root: Path, env: dict[str, str], serve: str) -> Path:
    assert brewkb(root.parent, env, "init", root.name).returncode == 0
    (root / "recipes" / "cancel-order.md").write_text(RECIPE)
    with (root / "brewkb.toml").open("a") as config:
        config.write(f"\n[serve]\n{serve}\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a recipe")
    return root


class Server:
    """``brewkb serve --port 0 --json`` in ``kb``, ready when its first line says so."""

    def __init__(self, kb: Path, env: dict[str, str], *args: str, session: bool = False) -> None:
        self.log = kb.parent / f"serve-{time.monotonic_ns()}.err"
        with self.log.open("w") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "brewkb", "serve", "--port", "0", "--json", *args],
                                            cwd=kb, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                            start_new_session=session)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, self.log.read_text()
        self.info = json.loads(line)
        self.url = self.info["url"]

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=10) as answer:
            return json.loads(answer.read())

    def post(self, path: str, value: Any) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(self.url + path, data=json.dumps(value).encode(), method="POST",
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def wait(self, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The status once ``done`` says so (polled: the server writes and follows the branch on its own)."""
        deadline = time.monotonic() + 30
        while True:
            status = self.get("/brewkb/status")
            if done(status) or time.monotonic() > deadline:
                return status
            time.sleep(0.05)

    def recorded(self, kb: Path, done: Callable[[dict[str, dict[str, Any]]], bool]) -> dict[str, dict[str, Any]]:
        """The conversations of the current run once ``done`` holds for them."""
        status = self.wait(lambda s: done(journal(kb, s["run"])))
        return journal(kb, status["run"])

    def stop(self, sig: signal.Signals = signal.SIGTERM, group: bool = False) -> tuple[int, dict[str, Any]]:
        """Signal the server (``group``: its whole process group, as Ctrl-C in a terminal does) and read its status."""
        if group:
            os.killpg(self.process.pid, sig)
        else:
            self.process.send_signal(sig)
        out, _ = self.process.communicate(timeout=60)
        return self.process.returncode, json.loads(out.strip().splitlines()[-1])


QUICK = "flush_seconds = 0.2\nrefresh_seconds = 0.2\nread_timeout = 0.5\nbody_timeout = 0.5"
"""The ``[serve]`` settings of the tests' servers: quick to write, to follow the branch and to give up."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str], FakeOpenAI, Server]]:
    home = tmp_path_factory.mktemp("serve-home")
    env = environment(home)
    kb = make_kb(tmp_path_factory.mktemp("serve") / "kb", env, QUICK)
    with FakeOpenAI(default=reply) as fake:
        server = Server(kb, env, "--upstream", fake.base_url)
        yield kb, env, fake, server
        if server.process.poll() is None:
            server.stop()


def journal(kb: Path, run: str) -> dict[str, dict[str, Any]]:
    """The latest line of each conversation the server wrote into ``run``."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((kb / "runs" / run / "serve").glob("*.jsonl")):
        if not path.name.endswith(".outcomes.jsonl"):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                found[record["meta"]["conversation_id"]] = record
    return found


def same(message: Any) -> tuple[Any, ...]:
    """A message as the client holds it (an SDK object or a dict), compared by what it says."""
    data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    calls = tuple((c["id"], c["function"]["name"], c["function"]["arguments"]) for c in data.get("tool_calls") or ())
    return data["role"], data.get("content") or None, calls, data.get("tool_call_id")


def told(recorded: list[Any], seen: list[Any]) -> bool:
    """Whether the recorded messages are the ones the client saw, told through the
    trust boundary (ids and personal data as placeholders)."""
    if len(recorded) != len(seen):
        return False
    for mine, theirs in zip(map(same, recorded), map(same, seen), strict=True):
        texts = [(mine[1] or "", theirs[1] or "")] + [(a[2], b[2]) for a, b in zip(mine[2], theirs[2], strict=True)]
        if (mine[0], mine[3], [c[:2] for c in mine[2]]) != (theirs[0], theirs[3], [c[:2] for c in theirs[2]]) \
                or not all(told_from(a, b) for a, b in texts):
            return False
    return True


def sent_to_upstream(fake: FakeOpenAI, text: str) -> list[dict[str, Any]]:
    return [body for path, body in fake.requests if path.endswith("/chat/completions")
            and any(m.get("content") == text for m in body["messages"])]


def test_an_sdk_agent_gets_recipes_its_tool_calls_round_trip_and_its_turns_are_recorded(setup: Any) -> None:
    kb, env, fake, server = setup
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
    ask = "Please cancel the order [sync1], I do not need it."
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask}]
    first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                           extra_headers={"X-Brewkb-Conversation": "sync-1"})
    [call] = first.choices[0].message.tool_calls
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("call-sync1", "find_order",
                                                                                    {"ref": "Rsync1"})
    messages += [first.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": '{"state": "open"}'}]
    final = client.chat.completions.with_raw_response.create(model="m", messages=messages, tools=TOOLS,
                                                             extra_headers={"X-Brewkb-Conversation": "sync-1"})
    assert final.headers["x-brewkb-conversation"] == "sync-1"
    assert final.headers["x-brewkb-recipes"] == "cancel-order"
    messages.append(final.parse().choices[0].message)
    assert messages[-1].content == "Order sync1 is cancelled."

    # the upstream got the client's system prompt unchanged as the start of its first message, then the recipe
    [upstream_first, upstream_final] = sent_to_upstream(fake, ask)
    system = upstream_first["messages"][0]["content"]
    assert system.startswith(SYSTEM + "\n\n# Recipes from the knowledge base") and "find_order(ref)" in system
    # the words of requests a recipe quotes are for finding it: no agent is given them
    assert "The customer wants an order cancelled." in system and "do not need it anymore" not in system
    assert [m["role"] for m in upstream_final["messages"]] == ["system", "user", "assistant", "tool"]
    assert all(h.get("Authorization") == f"Bearer {KEY}" for h in fake.headers[-2:])

    # async and streamed, with no conversation header: the deltas arrive as the upstream sent them, in order
    async def streamed() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=server.url, api_key=KEY, max_retries=0) as aclient:
            chat: list[Any] = [{"role": "system", "content": SYSTEM},
                               {"role": "user", "content": "Cancel the order [async1] please."}]
            for _ in range(2):
                stream = await aclient.chat.completions.create(model="m", messages=chat, tools=TOOLS, stream=True,
                                                               stream_options={"include_usage": True})
                text, calls, pieces = "", {}, []
                async for chunk in stream:
                    for choice in chunk.choices:
                        text += choice.delta.content or ""
                        pieces.append(choice.delta.content)
                        for delta in choice.delta.tool_calls or ():
                            held = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                            held["id"] += delta.id or ""
                            held["name"] += (delta.function.name or "") if delta.function else ""
                            held["arguments"] += (delta.function.arguments or "") if delta.function else ""
                message: dict[str, Any] = {"role": "assistant", "content": text or None}
                if calls:
                    # the role chunk's empty text, then three call deltas and the finish without text
                    assert pieces.count("") == 1 and len([p for p in pieces if p is None]) == 4
                    message["tool_calls"] = [{"id": c["id"], "type": "function",
                                              "function": {"name": c["name"], "arguments": c["arguments"]}}
                                             for c in calls.values()]
                    chat += [message, {"role": "tool", "tool_call_id": calls[0]["id"], "content": "open"}]
                else:
                    assert [p for p in pieces if p] == ["Order ", "async1 ", "is ", "cancelled."]
                    chat.append(message)
            return chat

    chat = asyncio.run(streamed())
    assert chat[2]["tool_calls"][0]["function"] == {"name": "find_order", "arguments": '{"ref": "Rasync1"}'}

    # upstream errors come back as the upstream sent them; a silent upstream is a 504
    with pytest.raises(openai.RateLimitError) as busy:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi [busy]"}])
    assert busy.value.response.headers["retry-after"] == "7"
    assert busy.value.body == {"message": "slow down", "type": "fake"}
    with pytest.raises(openai.APIStatusError) as stalled:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi [stall]"}])
    assert stalled.value.status_code == 504 and "did not answer within 0.5 s" in stalled.value.message
    assert [m.id for m in client.models.list()] == ["fake"]  # other paths go through

    recorded = server.recorded(kb, lambda found: len(found.get("sync-1", {}).get("messages", [])) == 5 and any(
        "[async1]" in r["task"] and len(r["messages"]) == 5 for r in found.values()))
    assert told(recorded["sync-1"]["messages"], messages)
    assert recorded["sync-1"]["meta"]["tools"] == ["find_order"]  # what the agent offered its model: its tools
    assert "Rsync1" not in json.dumps(recorded["sync-1"])  # the id the tool was given is scrubbed
    by_history = next(r for r in recorded.values() if "[async1]" in r["task"])
    assert told(by_history["messages"], chat)
    assert by_history["meta"]["grouped_by"] == "history" and by_history["usage"]["calls"] == 2
    for record in (recorded["sync-1"], by_history):
        assert [t["recipes"] for t in record["meta"]["turns"]] == [["cancel-order"]] * 2
        assert {t["revision"] for t in record["meta"]["turns"]} == {server.info["revision"]}
        assert "Recipes from the knowledge base" not in json.dumps(record)  # the injected block is never recorded
    assert by_history["usage"]["prompt_tokens"] > 0 and by_history["meta"]["models"] == ["m"]


def test_64_concurrent_conversations_are_never_mixed(setup: Any) -> None:
    kb, env, fake, server = setup

    async def one(client: openai.AsyncOpenAI, n: int) -> list[Any]:
        chat: list[Any] = [{"role": "system", "content": SYSTEM},
                           {"role": "user", "content": f"Cancel my order [par{n}] now."}]
        first = await client.chat.completions.create(model="m", messages=chat, tools=TOOLS)
        [call] = first.choices[0].message.tool_calls
        chat += [first.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": f"par{n} open"}]
        second = await client.chat.completions.create(model="m", messages=chat, tools=TOOLS)
        return [*chat, second.choices[0].message]

    async def all_of_them() -> list[list[Any]]:
        async with openai.AsyncOpenAI(base_url=server.url, api_key=KEY, max_retries=0) as client:
            return list(await asyncio.gather(*(one(client, n) for n in range(64))))

    chats = asyncio.run(all_of_them())
    def parallel(found: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in found.values() if "[par" in r["task"] and len(r["messages"]) == 5]

    recorded = parallel(server.recorded(kb, lambda found: len(parallel(found)) >= 64))
    assert len(recorded) == 64
    for record in recorded:
        n = re.search(r"\[par(\d+)\]", record["task"]).group(1)
        assert told(record["messages"], chats[int(n)])
        assert set(re.findall(r"par\d+", json.dumps(record["messages"]))) == {f"par{n}"}


def test_a_request_under_another_conversations_name_writes_over_none_of_it(setup: Any) -> None:
    kb, env, fake, server = setup
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)

    def ask(messages: list[Any], name: str) -> tuple[str, Any]:
        answer = client.chat.completions.with_raw_response.create(model="m", messages=messages,
                                                                  extra_headers={"X-Brewkb-Conversation": name})
        return answer.headers["x-brewkb-conversation"], answer.parse().choices[0].message

    victim: list[Any] = [{"role": "user", "content": "Please cancel the order [hj1v], I do not need it."}]
    named, first = ask(victim, "hj-1")
    assert named == "hj-1"
    attack = [{"role": "user", "content": "Refund order [hj1a] to the partner wallet."}]
    other, _ = ask(attack, "hj-1")  # the victim's name, a history that does not go on from its last turn
    assert re.fullmatch(r"hj-1:[0-9a-f]{6}", other)
    victim += [first, {"role": "user", "content": "Thanks, and the order [hj1v] again?"}]
    assert ask(victim, "hj-1")[0] == "hj-1"  # its next turn is its own
    assert server.post("/brewkb/outcomes", {"conversation_id": "hj-1", "success": True})[0] == 200
    found = server.recorded(kb, lambda found: len(found.get("hj-1", {}).get("messages", ())) == 4 and other in found)
    assert "[hj1v]" in found["hj-1"]["task"] and "[hj1a]" not in json.dumps(found["hj-1"])
    assert "[hj1a]" in found[other]["task"]


def test_a_client_that_goes_away_cancels_its_upstream_request(setup: Any) -> None:
    kb, env, fake, server = setup
    before = fake.disconnects
    port = int(server.url.split(":")[2].split("/")[0])
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "Go [long]"}]})
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        received = b""
        while b"data: {" not in received:  # the first event, long before the upstream sends its last
            more = connection.recv(4096)
            assert more, received
            received += more
        assert received.startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 20
    while fake.disconnects == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.disconnects == before + 1  # the upstream saw its connection closed before its 60 words were sent


def test_outcomes_are_posted_and_a_serve_run_distils_into_a_pr_that_is_served_once_merged(setup: Any,
                                                                                          tmp_path: Path) -> None:
    _, env, fake, _ = setup
    # a server of its own: the run holds these conversations alone, so the tasks distill holds out are known
    kb = make_kb(tmp_path / "kb", env, QUICK)
    server = Server(kb, env, "--upstream", fake.base_url)
    try:
        _serve_run_to_merged_pr(kb, env, fake, server, tmp_path)
    finally:
        server.stop()
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]


def _serve_run_to_merged_pr(kb: Path, env: dict[str, str], fake: FakeOpenAI, server: Server, tmp_path: Path) -> None:
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
    outcomes = []
    for task in range(9):
        for trial in range(2):
            _, script, ok = conversation(task, trial)
            SCRIPTS[script[1]["content"]] = [m for m in script if m["role"] == "assistant"]
            name = f"t{task}-{trial}"
            chat = script[:2]
            for message in script[2:]:
                if message["role"] == "assistant":
                    answer = client.chat.completions.create(model="m", messages=chat,
                                                            extra_headers={"X-Brewkb-Conversation": name})
                    chat.append(answer.choices[0].message)
                    assert same(chat[-1]) == same(message)
                else:
                    chat.append(message)
            outcomes.append({"conversation_id": name, "success": ok})
    assert server.post("/brewkb/outcomes", outcomes[:-1]) == (200, {"recorded": 17})
    assert server.post("/brewkb/outcomes", {"conversation_id": "t8-1", "success": "yes"})[0] == 400
    lengths = {o["conversation_id"]: len(conversation(*map(int, o["conversation_id"][1:].split("-")))[1])
               for o in outcomes}
    server.recorded(kb, lambda found: all(len(found.get(c, {}).get("messages", ())) == n for c, n in lengths.items()))
    run = server.get("/brewkb/status")["run"]
    plan = brewkb(kb, env, "distill", run, "--plan", "--json")  # reads what the server wrote, writes nothing
    assert json.loads(plan.stdout)["trajectories"] == len(journal(kb, run)) and \
        not (kb / "runs" / run / "rollouts.jsonl").exists()
    (tmp_path / "late.csv").write_text("conversation_id,success\nt8-1,false\n")
    imported = brewkb(kb, env, "import", f"runs/{run}", "--outcomes", str(tmp_path / "late.csv"), "--json")
    assert imported.returncode == 0, imported.stderr
    assert f"runs/{run} looks like `serve`" in imported.stderr
    counts = json.loads(imported.stdout)
    assert (counts["run"], counts["labels_attached"], counts["unmatched_labels"]) == (run, 1, 0)
    rollouts = [json.loads(line) for line in (kb / "runs" / run / "rollouts.jsonl").read_text().splitlines()]
    labelled = {t["meta"]["conversation_id"]: t["outcome"]["success"] for t in rollouts
                if t["meta"]["conversation_id"].startswith("t")}
    assert labelled == {o["conversation_id"]: o["success"] for o in outcomes}
    assert PERSONAL.findall((kb / "runs" / run / "rollouts.jsonl").read_text()) == []  # scrubbed before writing

    done = brewkb(kb, env, "distill", run, "--iterations", "1")
    assert done.returncode == 0, done.stderr
    again = brewkb(kb, env, "import", f"runs/{run}", "--format", "serve")  # the way on keeps the recordings
    assert again.returncode == 1 and f"`brewkb import runs/{run} --format serve --run NEW`" in again.stderr
    assert "delete" not in again.stderr and (kb / "runs" / run / "serve").is_dir()
    assert "imported from serve logs" in git(kb, "log", "-1", "--format=%B", f"brew/{run}/pr")
    changed = git(kb, "diff", "--name-only", "HEAD", f"brew/{run}/pr").split()
    assert "recipes/cancel-pending-order.md" in changed
    git(kb, "merge", "-q", "--no-edit", f"brew/{run}/pr")
    head = git(kb, "rev-parse", "HEAD").strip()
    status = server.wait(lambda s: s["revision"] == head)
    assert (status["revision"], status["run"]) == (head, f"serve-{head[:12]}")
    assert not (kb / "runs" / f"{run}-2").exists()  # what distill began takes no more; nothing went to the next
    ask = "Please cancel order #W7001 for me."
    answer = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": ask}])
    assert answer.headers["x-brewkb-revision"] == head
    assert "cancel-pending-order" in answer.headers["x-brewkb-recipes"].split(",")
    assert "cancel_pending_order" in sent_to_upstream(fake, ask)[0]["messages"][0]["content"]
    runs = server.wait(lambda s: s["run"] in s["recorder"]["runs"])["recorder"]["runs"]
    assert runs[run] >= 18 and runs[status["run"]] >= 1  # what was written where, as the stop line says it


def test_the_key_is_in_no_file(setup: Any) -> None:
    kb, env, fake, server = setup
    assert server.get("/brewkb/status")["requests"] > 0
    files = [p for p in (*kb.rglob("*"), *kb.parent.glob("serve-*.err"), *Path(env["HOME"]).rglob("*")) if p.is_file()]
    assert len(files) > 20 and not [p for p in files if KEY.encode() in p.read_bytes()]


def test_an_upstream_that_is_down_is_a_502_naming_it(setup: Any) -> None:
    kb, env, fake, server = setup
    closed = socket.socket()  # bound and never listening, for the whole test: refused, and no server gets its port
    closed.bind(("127.0.0.1", 0))
    down = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    draft = kb / "recipes" / "draft.md"  # not committed: not served, and the server says so
    draft.write_text("---\nname: draft\ndescription: a draft\n---\n")
    other = Server(kb, env, "--upstream", down, "--run", "down")
    draft.unlink()
    try:
        client = openai.OpenAI(base_url=other.url, api_key=KEY, max_retries=0)
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
        assert failed.value.status_code == 502
        assert failed.value.body["type"] == "upstream_unreachable" and down in failed.value.body["message"]
    finally:
        code, status = other.stop()
        closed.close()
    assert code == 0 and status["errors"] == 1
    assert "recipes/draft.md is not committed: the server starts from HEAD without it" in other.log.read_text()
    wrong = brewkb(kb, env, "serve", "--upstream", "localhost:8000", "--run", "down")
    assert (wrong.returncode, wrong.stderr.splitlines()) == (1, [
        "brewkb: error: the upstream must be an http:// or https:// URL such as https://api.openai.com/v1, got "
        "'localhost:8000'; check --upstream or serve.upstream"])
    # `--upstream "$OPENAI_BASE_URL"` with the variable unset: refused, not api.openai.com; --json says so in a line
    empty = brewkb(kb, env, "serve", "--upstream", "", "--port", "0", "--json")
    assert empty.returncode == 1 and "--upstream is empty" in empty.stderr
    assert json.loads(empty.stdout) == {"event": "error", "error": empty.stderr.split("brewkb: error: ", 1)[1].strip()}


def test_a_server_that_is_its_own_upstream_answers_508_at_once(setup: Any) -> None:
    kb, env, fake, server = setup
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    looped = Server(kb, env, "--port", str(port), "--upstream", f"http://127.0.0.1:{port}/v1", "--run", "loop")
    try:
        code, answer = looped.post("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert code == 508 and answer["error"]["type"] == "loop_detected"
        assert "leads back to this server" in answer["error"]["message"]
        assert looped.get("/brewkb/status")["requests"] == 2  # the request, and itself coming back once
    finally:
        assert looped.stop()[0] == 0


def test_a_compressed_body_goes_on_decompressed_and_one_that_does_not_decompress_is_a_400(setup: Any) -> None:
    kb, env, fake, server = setup
    body = {"model": "m", "messages": [{"role": "user", "content": "cancel order [gzip]"}]}
    for data, expected in ((gzip.compress(json.dumps(body).encode()), 200), (b"not gzip at all", 400)):
        request = urllib.request.Request(server.url + "/chat/completions", data=data, method="POST", headers={
            "content-type": "application/json", "content-encoding": "gzip"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                code, said = answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            code, said = exc.code, json.loads(exc.read())
        assert code == expected, said
    assert len(sent_to_upstream(fake, "cancel order [gzip]")) == 1
    assert said["error"]["type"] == "invalid_request_error" and "Content-Encoding: gzip" in said["error"]["message"]
    assert "Traceback" not in server.log.read_text()


def _raw(server: Server, request: bytes) -> bytes:
    """What the server answers ``request`` sent as it is on a socket of its own."""
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        return connection.recv(65536)


def test_hostile_requests_are_answered_and_leave_no_traceback(setup: Any) -> None:
    kb, env, fake, server = setup
    # a lone surrogate, written as JSON escapes it: retrieved for, forwarded as the client wrote it
    code, answer = server.post("/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "\ud800 cancel order [lone]"}]})
    assert code == 200 and answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "find_order"
    [forwarded] = [body for _, body in fake.requests if "[lone]" in json.dumps(body)]
    assert forwarded["messages"][-1]["content"] == "\ud800 cancel order [lone]"
    # tools no model API would take: forwarded for the upstream to answer, recorded as offering nothing known
    code, answer = server.post("/chat/completions", {"model": "m", "tools": "cancel_order", "messages": [
        {"role": "user", "content": "cancel order [odd tools]"}]})
    assert code == 200 and any("[odd tools]" in json.dumps(body) for _, body in fake.requests)
    # a body promised and never sent: 408 once serve.body_timeout has passed
    late = _raw(server, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}")
    assert late.startswith(b"HTTP/1.1 408") and b"serve.body_timeout" in late
    # a header over aiohttp's limit: its 400, and one warning line
    huge = _raw(server, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n")
    assert huge.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request")
    log = server.log.read_text()
    assert "Traceback" not in log and re.search(r"brewkb: WARNING: Error handling request from \S+: \S", log)
    assert "not recorded" not in log
    # a role that is no text: forwarded, and the recorder leaves the message out instead of failing
    code, _ = server.post("/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": "cancel order [list role]"}, {"role": ["user"], "content": "x"}]})
    assert code == 200
    server.recorded(kb, lambda found: any("[list role]" in r["task"] for r in found.values()))
    assert "unhashable" not in server.log.read_text() and server.get("/brewkb/status")["recorder"]["failed"] == 0
    # a path that climbs out of the upstream's base path is not forwarded
    asked = len(fake.requests)
    climbed = _raw(server, b"GET /v1/../../admin HTTP/1.1\r\nHost: x\r\n\r\n")
    assert climbed.startswith(b"HTTP/1.1 400") and b"segments" in climbed and len(fake.requests) == asked
    # the server's own paths never reach the upstream
    asked = len(fake.requests)
    for method, path, expected in (("PUT", "/brewkb/status", 405), ("GET", "/brewkb/outcomes", 405),
                                   ("GET", "/brewkb/nothing", 404)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(server.url + path, method=method), timeout=10)
        assert refused.value.code == expected and json.loads(refused.value.read())["error"]["type"] in (
            "method_not_allowed", "not_found")
    assert len(fake.requests) == asked
    # a score JSON reads as infinite is no score
    code, said = server.post("/brewkb/outcomes", {"conversation_id": "c-1", "score": float("inf")})
    assert code == 400 and said["error"]["message"] == "`score` must be a finite number"


def test_a_message_of_a_megabyte_written_to_be_slow_leaves_the_server_answering(setup: Any) -> None:
    kb, env, fake, server = setup
    slow = "reset " + "a-" * 500_000  # a pattern that backtracked over it would hold the interpreter for minutes
    assert server.post("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": slow}]})[0] == 200
    # recorded (other tests' conversations may be written meanwhile), and the server answered meanwhile
    server.recorded(kb, lambda found: any(r["task"].startswith("reset a-a-") for r in found.values()))
    code, _ = server.post("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Go [after]"}]})
    assert code == 200


def test_a_conversation_refused_at_the_boundary_leaves_the_others_written(setup: Any) -> None:
    kb, env, fake, server = setup
    before = server.get("/brewkb/status")["recorder"]
    invented = [{"role": "user", "content": "Go [refused]"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "rm -rf /", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"}]
    results: list[int] = []
    posts = [threading.Thread(target=lambda m=m: results.append(server.post("/chat/completions", {
        "model": "m", "messages": m})[0])) for m in (invented, [{"role": "user", "content": "Go [kept]"}])]
    for post in posts:
        post.start()
    for post in posts:
        post.join()
    run = server.get("/brewkb/status")["run"]
    server.wait(lambda s: s["recorder"]["refused"] > before["refused"] and s["recorder"]["pending"] == 0)
    status = server.get("/brewkb/status")["recorder"]
    assert results == [200, 200]
    assert (status["refused"], status["failed"]) == (before["refused"] + 1, before["failed"])
    tasks = [record["task"] for record in journal(kb, run).values()]
    assert "Go [kept]" in tasks and "Go [refused]" not in tasks
    assert "rm -rf" not in "".join(p.read_text() for p in (kb / "runs").rglob("*.jsonl"))


def test_a_conversation_that_ends_the_scrubbing_process_loses_only_itself(tmp_path: Path) -> None:
    from brewkb.config import Config
    from brewkb.run.folder import Run
    from brewkb.run.recordings import Recorder, Turn

    class Ending(Recorder):
        """The scrubbing process ends whenever it is given the conversation ``poison``."""

        def _admit(self, conversations: Any) -> Any:
            if any(turn.conversation == "poison" for turn, _ in conversations):
                raise RuntimeError("the process that scrubs recordings ended")
            return super()._admit(conversations)

    run = Run("calls", tmp_path / "runs" / "calls")
    recorder = Ending(Config(), writer="w")
    for name in ("first", "poison", "last"):
        recorder.add(Turn(name, "header", [{"role": "user", "content": f"Go [{name}]"}],
                          {"role": "assistant", "content": "done"}, "r1", (), "m", {}, run))
    recorder.close()  # every conversation held is written at once: one batch
    assert (recorder.counts["written"], recorder.counts["failed"]) == (2, 1)
    written = [json.loads(line)["task"] for line in (run.path / "serve" / "w.jsonl").read_text().splitlines()]
    assert written == ["Go [first]", "Go [last]"]


def test_a_body_over_the_limit_is_a_413_in_openais_shape(tmp_path: Path) -> None:
    env = environment(tmp_path / "home")
    kb = make_kb(tmp_path / "kb", env, "max_request_mb = 1")
    with FakeOpenAI(default=reply) as fake:
        server = Server(kb, env, "--upstream", fake.base_url)
        try:
            code, said = server.post("/chat/completions", {"model": "m", "messages": [
                {"role": "user", "content": "x" * 1_200_000}]})
        finally:
            server.stop()
    assert code == 413 and said["error"] == {"message": "the request's body is over 1 MB (serve.max_request_mb)",
                                             "type": "request_too_large", "param": None, "code": "request_too_large"}
    assert not fake.requests


def test_the_stop_line_names_every_run_written_into(tmp_path: Path) -> None:
    """Without --json: the start lines, and a stop line that names each run when the branch moved meanwhile."""
    env = environment(tmp_path / "home")
    kb = make_kb(tmp_path / "kb", env, "flush_seconds = 0.1\nrefresh_seconds = 0.1")
    with FakeOpenAI(default=reply) as fake:
        process = subprocess.Popen([sys.executable, "-m", "brewkb", "serve", "--port", "0", "--upstream",
                                    fake.base_url], cwd=kb, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        assert process.stdout is not None
        started = process.stdout.readline()
        url = re.search(r" on (http://\S+/v1), in front of ", started)
        assert url, started + process.stdout.readline()
        assert process.stdout.readline().startswith("Recording into run serve-")
        client = openai.OpenAI(base_url=url[1], api_key=KEY, max_retries=0)

        def status() -> dict[str, Any]:
            with urllib.request.urlopen(url[1] + "/brewkb/status", timeout=10) as answer:
                return json.loads(answer.read())

        def written(n: int) -> dict[str, Any]:
            deadline = time.monotonic() + 30
            while (now := status())["recorder"]["written"] < n and time.monotonic() < deadline:
                time.sleep(0.05)
            return now

        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Go [one]"}])
        first = written(1)["run"]
        (kb / "recipes" / "refund-order.md").write_text(RECIPE.replace("cancel-order", "refund-order"))
        git(kb, "add", "-A")
        git(kb, "commit", "-qm", "another recipe")
        deadline = time.monotonic() + 30
        while status()["run"] == first and time.monotonic() < deadline:
            time.sleep(0.05)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Go [two]"}])
        second = written(2)["run"]
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out.splitlines()[-1] == (f"Stopped after 2 requests (2 chat); 2 conversations written into runs {first} (1) "
                                    f"and {second} (1).")


@pytest.mark.parametrize("group", [False, True], ids=["sigterm", "ctrl-c-to-the-process-group"])
def test_a_signal_lets_a_request_in_flight_finish_and_writes_every_conversation(tmp_path: Path, group: bool) -> None:
    """SIGTERM to the server; or SIGINT to its whole process group, as Ctrl-C in a terminal sends it, once a
    conversation was written (so the process that scrubs recordings runs, and gets the signal too)."""
    env = environment(tmp_path / "home")
    kb = make_kb(tmp_path / "kb", env, "flush_seconds = 0.2" if group else "flush_seconds = 600")
    with FakeOpenAI(default=reply) as fake:
        server = Server(kb, env, "--upstream", fake.base_url, "--run", "calls", session=group)
        client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
        if group:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Go [first]"}])
            assert server.wait(lambda s: s["recorder"]["written"] == 1)["recorder"]["written"] == 1
        got: list[str] = []

        def read() -> None:
            stream = client.chat.completions.create(model="m", stream=True,
                                                    messages=[{"role": "user", "content": "Go [slow]"}])
            got.extend(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

        reader = threading.Thread(target=read)
        reader.start()
        while fake.count < 1 + group:
            time.sleep(0.01)
        code, status = server.stop(signal.SIGINT, group=True) if group else server.stop()
        reader.join()
    assert "".join(got) == " ".join(f"word{i}" for i in range(12))
    recorder = status["recorder"]
    assert code == 0 and (recorder["written"], recorder["failed"], recorder["pending"]) == (1 + group, 0, 0)
    assert "Traceback" not in server.log.read_text()
    records = list(journal(kb, "calls").values())
    assert len(records) == 1 + group and records[-1]["messages"][-1]["content"] == "".join(got)



@pytest.mark.parametrize("placement, roles, where", [
    ("system", ["system", "developer", "user"], (1, "developer rules\n\nBLOCK")),
    ("system", ["user"], (0, "BLOCK")),
    ("message", ["system", "developer", "user"], (2, "BLOCK")),
    ("user", ["system", "user", "assistant", "user"], (3, "last ask\n\nBLOCK")),
])
def test_the_block_goes_where_the_placement_says_and_the_clients_messages_stay_as_they_were(
        placement: str, roles: list[str], where: tuple[int, str]) -> None:
    from brewkb.api.serve import inject

    texts = {"system": "be kind", "developer": "developer rules", "assistant": "sure"}
    messages = [{"role": r, "content": texts.get(r, "last ask")} for r in roles]
    before = json.dumps(messages)
    sent = inject(messages, "BLOCK", placement)
    assert json.dumps(messages) == before
    at, text = where
    assert sent[at]["content"] == text
    assert len(sent) == len(messages) + (placement == "message" or roles[0] == "user" and placement == "system")
    assert inject(messages, "", placement) is messages


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_an_event_stream_read_in_chunks_of_any_size_gives_the_answer_it_gives_whole(newline: bytes) -> None:
    from brewkb.serve.answers import Events
    events = [{"model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Looking "}}]},
              {"choices": [{"index": 0, "delta": {"content": "it up", "tool_calls": [
                  {"index": 0, "id": "c1", "function": {"name": "find_order", "arguments": '{"id": '}}]}}]},
              {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"7"}'}}]}},
               {"index": 1, "delta": {"content": "another choice"}}],
               "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}]
    stream = b"".join(b"data: " + json.dumps(e).encode() + newline * 2 for e in events) + b"data: [DONE]" + newline * 2
    expected = {"role": "assistant", "content": "Looking it up", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "find_order", "arguments": '{"id": "7"}'}}]}
    for size in (1, 2, 7, len(stream)):
        read = Events()
        for at in range(0, len(stream), size):
            read.feed(stream[at:at + size])
        answer = read.answer()
        assert read.done and answer is not None, size
        assert (answer.message, answer.model, answer.usage) == (expected, "m", {"prompt_tokens": 5,
                                                                              "completion_tokens": 3,
                                                                              "total_tokens": 8}), size
    broken = Events()
    broken.feed(b"data: " + json.dumps(events[0]).encode() + b"\n\ndata: {\"error\": {\"message\": \"busy\"}}\n\n")
    assert broken.done and broken.answer() is None


def test_turns_group_by_their_history_and_a_branch_is_a_conversation_of_its_own() -> None:
    from brewkb.serve.conversations import Conversations

    conversations = Conversations(keep=2)
    user = {"role": "user", "content": "hi"}
    answer = {"role": "assistant", "content": "hello", "refusal": None}
    first = conversations.open([user], None)
    conversations.close(first, answer)
    resent = {"role": "assistant", "content": "hello"}  # as a client sends it back, without the null fields
    second = conversations.open([user, resent, {"role": "user", "content": "more"}], None)
    assert second.id == first.id
    conversations.close(second, {"role": "assistant", "content": "here"})
    branch = conversations.open([user, resent, {"role": "user", "content": "other"}], None)
    assert branch.id != first.id  # the first turn's state was left behind when the conversation went on
    assert conversations.open([user], "named-1").id == "named-1"  # a name it holds no conversation of
    for n in range(3):  # more conversations than it keeps: the oldest is forgotten
        conversations.close(conversations.open([{"role": "user", "content": str(n)}], None), answer)
    later = [user, resent, {"role": "user", "content": "more"}, {"role": "assistant", "content": "here"}]
    assert conversations.open(later, None).id != first.id


def test_the_reader_puts_a_conversation_recorded_in_two_parts_back_together(tmp_path: Path) -> None:
    from brewkb.trajectories.formats import import_file
    from brewkb.trajectories.schema import Trajectory, UNKNOWN

    def line(conversation: str, messages: list[dict[str, Any]], turns: list[int], by: str = "history") -> str:
        return Trajectory(conversation, "ask", tuple(messages), UNKNOWN, meta={
            "source": "serve", "conversation_id": conversation, "grouped_by": by,
            "turns": [{"at": at, "revision": "r1", "recipes": [f"recipe-{at}"]} for at in turns]}).to_line() + "\n"

    ask, said = {"role": "user", "content": "ask"}, {"role": "assistant", "content": "answer"}
    more, last = {"role": "user", "content": "more"}, {"role": "assistant", "content": "done"}
    folder = tmp_path / "serve"
    folder.mkdir()
    (folder / "a.jsonl").write_text(line("c-1", [ask, said], [1]) + line("n-1", [ask, said], [1], "header")
                                    + '{"id": "cut sho')
    (folder / "b.jsonl").write_text(line("c-2", [ask, said, more, last], [3]))
    posted = [{"conversation_id": "c-1", "success": True, "time": 1},
              *({"conversation_id": f"ghost-{n}", "success": True, "time": 2} for n in range(1_000)),  # never recorded
              {"conversation_id": "c-2", "score": float("inf"), "time": 5},  # no score: read past
              {"conversation_id": "n-1", "success": False, "time": 3},
              {"conversation_id": "n-1", "success": True, "time": 2}]  # written later, posted earlier
    (folder / "b.outcomes.jsonl").write_text("".join(json.dumps(row) + "\n" for row in posted))
    items = list(import_file(tmp_path, "serve"))
    assert [type(i).__name__ for i in items] == ["Skipped", "Trajectory", "Trajectory"]
    joined, named = items[1], items[2]
    assert joined.meta["conversation_id"] == "c-2" and len(joined.messages) == 4
    assert [t["at"] for t in joined.meta["turns"]] == [1, 3] and joined.kb.recipes == ("recipe-1", "recipe-3")
    assert joined.success is True  # the outcome posted for its first part
    assert named.meta["conversation_id"] == "n-1" and named.success is False  # a named conversation stays itself


def test_a_conversation_that_grew_since_its_import_replaces_its_copy_and_keeps_its_label(tmp_path: Path) -> None:
    from brewkb.api.trajectories import import_trajectories
    from brewkb.trajectories.schema import UNKNOWN, Trajectory, read_jsonl

    env = environment(tmp_path / "home")
    kb = make_kb(tmp_path / "kb", env, "")
    ask, said = {"role": "user", "content": "ask"}, {"role": "assistant", "content": "answer"}
    folder = kb / "runs" / "served" / "serve"
    folder.mkdir(parents=True)

    def write(*messages: dict[str, Any]) -> None:
        with (folder / "w.jsonl").open("a") as out:
            out.write(Trajectory("c-1", "ask", messages, UNKNOWN, meta={
                "source": "serve", "conversation_id": "c-1", "grouped_by": "history",
                "turns": [{"at": len(messages) - 1, "revision": "r", "recipes": []}]}).to_line() + "\n")

    write(ask, said)
    (tmp_path / "labels.csv").write_text("conversation_id,success\nc-1,true\n")
    first = import_trajectories(kb / "runs" / "served", "serve", outcomes=tmp_path / "labels.csv", start=kb)
    assert (first.run, first.imported, first.labels_attached) == ("served", 1, 1)
    write(ask, said, {"role": "user", "content": "more"}, {"role": "assistant", "content": "done"})
    again = import_trajectories(kb / "runs" / "served", "serve", start=kb)
    assert (again.imported, again.relabelled, again.total) == (1, 1, 1)
    [kept] = read_jsonl(kb / "runs" / "served" / "rollouts.jsonl")
    assert (len(kept.messages), kept.success, [t["at"] for t in kept.meta["turns"]]) == (4, True, [1, 3])

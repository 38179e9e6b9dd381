from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from brewkb.agents.base import run_episode
from brewkb.agents.external import CommandAgent, PythonAgent
from brewkb.agents.tool_agent import ToolAgent
from brewkb.config import LLMConfig
from brewkb.envs.base import Task
from brewkb.envs.tasks_file import TasksFileEnvironment
from brewkb.llm.client import LLMClient
from brewkb.retrieval.context import MemoryContext, NoContext
from brewkb.retrieval.ranking import Retriever
from brewkb.trajectories.schema import KBUse, Outcome, Trajectory, tool_calls
from tests.fakes.openai_server import FakeOpenAI

REPO = Path(__file__).resolve().parents[1]
TASK = Task("t1", "Greet the customer", "train", {"expected": "hello"})


class CounterEnv:
    """A tiny environment: a counter with `add(n)`; success when it reaches the target."""

    name = "counter"

    def __init__(self) -> None:
        self.graded: list[str] = []

    def tasks(self, split: str) -> list[Task]:
        return [TASK]

    def tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "add", "parameters": {
            "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}]

    def session(self, task: Task) -> Any:
        class Session:
            total = 0

            def call(self, name: str, arguments: Mapping[str, Any]) -> str:
                if name != "add" or not isinstance(arguments.get("n"), int):
                    return "Error: add(n) takes an integer n"
                self.total += arguments["n"]
                return str(self.total)

        return Session()

    def grade(self, task: Task, trajectory: Trajectory) -> Outcome:
        self.graded.append(trajectory.id)
        calls = [c.args() for c in tool_calls(trajectory.messages) if not c.error]
        total = sum(a["n"] for a in calls if a and isinstance(a.get("n"), int))
        return Outcome(total == 5, min(1.0, total / 5), {"total": total})

    def relabel_task(self, task: Task, actions: Sequence[Any], text: str) -> Task | None:
        return None


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_example_agent_is_a_good_command_agent() -> None:
    env = CounterEnv()
    agent = CommandAgent([sys.executable, str(REPO / "examples" / "echo_agent.py")], timeout=30)
    result = run_episode(agent, TASK, "## Recipe: greet\nSay hello.", env, KBUse("abc", ("greet",)))
    assert result.messages[-1]["content"] == "I read 1 recipe(s). Task: Greet the customer"
    assert "working on t1" in result.meta["stderr"]
    assert result.kb == KBUse("abc", ("greet",))
    assert result.outcome == Outcome(False, 0.0, {"total": 0})  # the grader decides, not the agent
    assert len(env.graded) == 1


def test_agent_that_logs_to_stdout_then_prints_json(tmp_path: Path) -> None:
    argv = script(tmp_path, "chatty.py", """
        import json, sys
        req = json.load(sys.stdin)
        print("loading model...")
        print(json.dumps({"messages": [{"role": "user", "content": req["task"]},
                                       {"role": "assistant", "content": "ok"}]}))
    """)
    result = run_episode(CommandAgent(argv, timeout=30), TASK, "", CounterEnv(), KBUse())
    assert "error" not in result.meta and result.messages[-1]["content"] == "ok"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("import sys; print('boom', file=sys.stderr); sys.exit(1)", "exited with status 1; its stderr ends: boom"),
        ("print('no json here')", "stdout held no JSON object"),
        ("import json; print(json.dumps({'messages': []}))", "not a valid trajectory"),
        ("import json; print(json.dumps([1, 2]))", "reply is a list, not a JSON object"),
    ],
)
def test_broken_agents_become_failed_trajectories(tmp_path: Path, body: str, error: str) -> None:
    result = run_episode(CommandAgent(script(tmp_path, "a.py", body), timeout=30), TASK, "", CounterEnv(), KBUse())
    assert not result.success and error in result.meta["error"]
    assert result.messages[0] == {"role": "user", "content": TASK.text}


def test_hanging_agent_and_its_children_are_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    argv = script(tmp_path, "hang.py", f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", {str(tmp_path)!r}])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(300)
    """)
    start = time.monotonic()
    result = run_episode(CommandAgent(argv, timeout=1.5), TASK, "", CounterEnv(), KBUse())
    assert time.monotonic() - start < 20
    assert "timed out after 1.5 s" in result.meta["error"]
    assert pid_file.exists() and not survivors(str(tmp_path))


def survivors(marker: str) -> list[int]:
    """The processes (zombies waiting for init aside) whose command line holds
    ``marker``, after giving the kernel a moment to end a PID namespace. Agents
    see their own namespace's process ids, so processes are found by their
    command line, not by an id the agent wrote down."""
    found: list[int] = []
    for _ in range(50):
        found = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read()
                with open(f"/proc/{entry}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
                continue
            if marker.encode() in argv and state not in ("Z", "X") and int(entry) != os.getpid():
                found.append(int(entry))
        if not found:
            return []
        time.sleep(0.1)
    return found


DETACH = """
    import json, os, sys, time
    req = json.load(sys.stdin)
    if os.fork() == 0:
        os.setsid()                                   # leaves the agent's session and process group
        if os.fork() == 0:
            open({pid_file!r}, "w").write(str(os.getpid()))
            {child}
        os._exit(0)
    while not os.path.exists({pid_file!r}):
        time.sleep(0.05)
    print(json.dumps({{"messages": [{{"role": "user", "content": req["task"]}},
                                    {{"role": "assistant", "content": "ok"}}]}}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper needs Linux prctl; elsewhere the "
                    "process group is killed")
def test_detached_children_do_not_outlive_the_episode(tmp_path: Path) -> None:
    pid_file = str(tmp_path / "grandchild.pid")
    argv = script(tmp_path, "detach.py", DETACH.format(pid_file=pid_file, child="time.sleep(300)"))
    start = time.monotonic()
    result = run_episode(CommandAgent(argv, timeout=120), TASK, "", CounterEnv(), KBUse())
    # the grandchild still holds the agent's stdout, yet the episode ended with the agent
    assert time.monotonic() - start < 60
    assert "error" not in result.meta and result.messages[-1]["content"] == "ok"
    assert Path(pid_file).exists() and not survivors(str(tmp_path))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper needs Linux prctl")
def test_timeout_kills_detached_children_too(tmp_path: Path) -> None:
    pid_file = str(tmp_path / "grandchild.pid")
    body = DETACH.format(pid_file=pid_file, child="time.sleep(300)").replace("print(json.dumps(", "time.sleep(300)\n"
                                                                              "    print(json.dumps(")
    result = run_episode(CommandAgent(script(tmp_path, "hang.py", body), timeout=3), TASK, "", CounterEnv(), KBUse())
    assert "timed out after 3 s" in result.meta["error"]
    assert Path(pid_file).exists() and not survivors(str(tmp_path))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper needs Linux prctl")
def test_an_agent_that_kills_its_reaper_leaves_nothing_behind(tmp_path: Path) -> None:
    pid_file = str(tmp_path / "grandchild.pid")
    body = DETACH.format(pid_file=pid_file, child="time.sleep(300)").replace(
        "print(json.dumps(", "import signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    print(json.dumps(")
    result = run_episode(CommandAgent(script(tmp_path, "escape.py", body), timeout=60), TASK, "", CounterEnv(),
                         KBUse())
    assert Path(pid_file).exists() and not survivors(str(tmp_path))
    assert not result.success


def test_missing_program_is_explained(tmp_path: Path) -> None:
    result = run_episode(CommandAgent([str(tmp_path / "no-such-agent")], timeout=30), TASK, "", CounterEnv(),
                         KBUse())
    assert result.meta["error"].startswith("cannot start") and "No such file" in result.meta["error"]


def test_flooding_agent_is_cut_off(tmp_path: Path) -> None:
    argv = script(tmp_path, "flood.py", """
        import sys
        chunk = "x" * 1_000_000
        for _ in range(100):
            sys.stdout.write(chunk)
    """)
    result = run_episode(CommandAgent(argv, timeout=60, max_output=2_000_000), TASK, "", CounterEnv(), KBUse())
    assert "more than 2000000 bytes" in result.meta["error"]


def test_python_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_agent.py").write_text(textwrap.dedent("""
        def run(request):
            if request["task_id"] == "boom":
                raise RuntimeError("kaput")
            return {"messages": [{"role": "user", "content": request["task"]},
                                 {"role": "assistant", "content": request["context"] or "none"}]}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = PythonAgent("my_agent:run")
    ok = run_episode(agent, TASK, "ctx", CounterEnv(), KBUse())
    assert ok.messages[-1]["content"] == "ctx"
    crashed = run_episode(agent, Task("boom", "x", "train"), "", CounterEnv(), KBUse())
    assert "agent crashed: RuntimeError: kaput" in crashed.meta["error"]


def test_tool_agent_against_the_fake_server() -> None:
    env = CounterEnv()
    with FakeOpenAI() as fake:
        fake.reply(
            {"tool_calls": [{"id": "1", "name": "add", "arguments": {"n": 2}},
                            {"id": "2", "name": "add", "arguments": {"n": 9}}]},
            {"tool_calls": [{"id": "3", "name": "add", "arguments": "{not json"}]},
            {"tool_calls": [{"id": "4", "name": "add", "arguments": {"n": 3}}]},
            {"content": "The counter is at 5."},
        )
        client = LLMClient(LLMConfig(backend="openai", base_url=fake.base_url, model="gpt-4o-mini"), environ={})
        agent = ToolAgent(client, max_steps=10)

        async def go() -> Trajectory:
            from brewkb.agents.base import arun_episode

            return await arun_episode(agent, TASK, "## Recipe: count\nAdd to five.", env, KBUse())

        result = asyncio.run(go())
        first_request = fake.requests[0][1]
    assert result.success and result.outcome.detail == {"total": 5}
    roles = [m["role"] for m in result.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "tool",
                     "assistant"]
    assert result.messages[4]["content"].startswith("Error: one tool call at a time")
    assert "not valid JSON" in result.messages[6]["content"]
    assert result.usage["calls"] == 4 and result.steps == 4
    assert "Add to five." in first_request["messages"][0]["content"]
    assert first_request["tools"] == env.tools()


def test_tool_agent_stops_at_the_step_budget() -> None:
    with FakeOpenAI(default={"tool_calls": [{"id": "1", "name": "add", "arguments": {"n": 1}}]}) as fake:
        client = LLMClient(LLMConfig(backend="openai", base_url=fake.base_url, model="gpt-4o-mini", cache=False), environ={})
        result = asyncio.run(ToolAgent(client, max_steps=3).arun(TASK, "", CounterEnv()))
    assert result.meta["stopped"] == "step budget of 3 reached" and fake.count == 3


def test_memory_contexts_pick_similar_successes_with_their_steps() -> None:
    def traj(task: str, ok: bool, tool: str) -> Trajectory:
        return Trajectory(task_id=task, task=task, messages=(
            {"role": "user", "content": task},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": tool, "arguments": '{"order_id": "12"}'}}]},
            {"role": "tool", "tool_call_id": "1", "content": "ok"}), outcome=Outcome(ok, float(ok)))

    pool = [traj("cancel my order 12", True, "cancel_order"), traj("cancel my order 13", False, "refund_order"),
            traj("book a flight", True, "book_flight")]
    text, kb = MemoryContext("trajectories", pool, Retriever(), k=1).context("please cancel my order")
    assert "cancel my order 12" in text and "order 13" not in text
    assert text.startswith("# Successful past conversations") and "1. `cancel_order(order_id)`" in text
    assert kb.recipes == (f"trajectories-{pool[0].id}",)
    note, _ = MemoryContext("notes", pool, Retriever(), k=1).context("please cancel my order")
    assert "## Note: notes-" in note and "1. `cancel_order(order_id)`" in note
    assert MemoryContext("notes", pool[1:2], Retriever()).context("x") == ("", KBUse())
    assert NoContext().context("x") == ("", KBUse())


def test_tasks_file_environment_with_a_grader_command(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "task": "say hello", "split": "test", "expected": "hello"}) + "\n")
    grader = script(tmp_path, "grade.py", """
        import json, sys
        req = json.load(sys.stdin)
        said = req["trajectory"]["messages"][-1]["content"]
        print(json.dumps({"success": req["data"]["expected"] in said, "detail": {"said": said}}))
    """)
    env = TasksFileEnvironment(tasks, grader)
    (task,) = env.tasks("test")
    assert env.tasks("train") == [] and task.data == {"expected": "hello"}
    good = Trajectory(task_id="a", task="say hello", messages=({"role": "assistant", "content": "hello!"},),
                      outcome=Outcome(False, 0.0))
    assert env.grade(task, good) == Outcome(True, 1.0, {"said": "hello!"})
    bad_grader = TasksFileEnvironment(tasks, script(tmp_path, "bad.py", "print('yes')"))
    assert "grader did not print" in bad_grader.grade(task, good).detail["error"]


def test_an_agent_killed_by_a_signal_is_reported_with_it(tmp_path: Path) -> None:
    from brewkb.isolation.subproc import run_capped

    argv = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    done = run_capped(argv, b"", timeout=30, max_output=1000)
    assert done.returncode == -9 and done.problem is None and b"Traceback" not in done.stderr

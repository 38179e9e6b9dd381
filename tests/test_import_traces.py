"""Traces made by the official instrumentation libraries (tests/traces.py)
import through the CLI as conversations, and distil into a PR."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from brewkb.trajectories.schema import Trajectory, read_jsonl, tool_calls
from tests.conftest import git
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.roles import embed, role_player
from tests.traces import CONVERSATIONS

ROOT = Path(__file__).resolve().parents[1]


def brewkb(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("traces")
    made = {}
    for mode, extra in (("genai", []), ("genai-events", []), ("legacy-events", []), ("openinference", []),
                        ("genai-document", ["--document"])):
        out = folder / f"{mode}.jsonl"
        done = subprocess.run([sys.executable, "-m", "tests.traces", mode.replace("-document", ""), str(out), *extra],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        made[mode] = out
    return made


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    root.mkdir()
    assert brewkb(root, "init").returncode == 0
    return root


def assert_conversations(trajectories: list[Trajectory], source: str) -> None:
    """Each logged conversation once, whole and in order: the user's request,
    the lookup and its result, the action and its result, the answer."""
    def told(text: str) -> str:  # the order ids the tools named are ids: replaced at import
        return re.sub(r"#W\d+", "<order_id>", text)

    assert sorted(t.task for t in trajectories) == sorted(told(c[0]) for c in CONVERSATIONS)
    by_task = {t.task: t for t in trajectories}
    for request, action, _, fails in CONVERSATIONS:
        t = by_task[told(request)]
        assert [m["role"] for m in t.messages] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                                   "assistant"]
        assert t.messages[1]["content"] == told(request)
        calls = tool_calls(t.messages)
        assert [(c.name, c.args()) for c in calls] == [
            ("find_order", {"order_id": "<order_id>"}), (action, {"order_id": "<order_id>", "reason": "customer request"})]
        assert json.loads(calls[0].result or "")["status"] == "pending"
        assert calls[1].error == fails
        assert all(m["tool_call_id"] == "call_0" for m in t.messages if m["role"] == "tool")  # ids kept
        assert t.messages[-1]["content"].startswith("Done:")
        assert t.success is None and t.outcome.score is None  # traces carry no verdict
        assert t.meta["source"] == source and t.usage["calls"] == 3 and t.usage["tokens_in"] > 0
        assert len(t.meta["trace_id"]) == 32


@pytest.mark.parametrize("mode", ["genai", "genai-events", "legacy-events", "genai-document"])
def test_genai_traces_of_the_official_instrumentation_import_as_conversations(
        traces: dict[str, Path], kb: Path, mode: str) -> None:
    done = brewkb(kb, "import", str(traces[mode]), "--format", "otel", "--run", "traced", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["imported"], summary["skipped"], summary["unlabelled"], summary["success_rate"]) == (
        10, 0, 10, None)
    trajectories = list(read_jsonl(kb / "runs" / "traced" / "rollouts.jsonl"))
    assert_conversations(trajectories, "otel")
    assert not any("tools" in t.meta for t in trajectories)  # this instrumentation records no tool definitions


def test_openinference_traces_import_as_conversations(traces: dict[str, Path], kb: Path) -> None:
    wrong = brewkb(kb, "import", str(traces["openinference"]), "--format", "otel")
    assert wrong.returncode == 1 and "looks like `openinference`; use --format openinference" in wrong.stderr
    done = brewkb(kb, "import", str(traces["openinference"]), "--format", "openinference", "--run", "oi")
    assert done.returncode == 0, done.stderr
    assert "Imported 10 trajectories into run oi (no outcome known, 10 unlabelled)" in done.stdout
    assert "10 conversations have no known outcome" in done.stderr
    trajectories = list(read_jsonl(kb / "runs" / "oi" / "rollouts.jsonl"))
    assert_conversations(trajectories, "openinference")
    assert all(t.meta["tools"] == ["cancel_order", "find_order", "return_order"] for t in trajectories)  # llm.tools


def _offering(traces: dict[str, Path], folder: Path, offered: list[str]) -> Path:
    """The genai traces with each conversation's chat spans recording ``gen_ai.tool.definitions`` (JSON text, as
    the conventions allow on spans): ``offered`` in turn, one per span."""
    lines, n = [], 0
    for line in traces["genai"].read_text().splitlines():
        request = json.loads(line)
        for spans in request.get("resourceSpans", []):
            for scope in spans["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"].startswith("chat"):
                        span["attributes"].append({"key": "gen_ai.tool.definitions",
                                                   "value": {"stringValue": offered[n % len(offered)]}})
                        n += 1
        lines.append(json.dumps(request))
    (folder / "offered.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "offered.jsonl"


@pytest.mark.parametrize(("fmt", "mode"), [("otel", "genai"), ("openinference", "openinference")])
def test_an_outcomes_file_labels_trace_conversations_by_their_conversation_id(
        traces: dict[str, Path], kb: Path, tmp_path: Path, fmt: str, mode: str) -> None:
    """docs/trajectories.md: a trace's conversation id (``gen_ai.conversation.id`` or ``session.id``, else the
    trace's, as the log has it; its task id too) is the id an outcomes file names it by."""
    assert brewkb(kb, "import", str(traces[mode]), "--format", fmt, "--run", "plain").returncode == 0
    ids = [t.task_id for t in read_jsonl(kb / "runs" / "plain" / "rollouts.jsonl")]
    assert len(set(ids)) == 10
    (tmp_path / "labels.csv").write_text("conversation_id,success\n" + "".join(f"{i},{n % 2}\n"
                                                                                for n, i in enumerate(ids)))
    done = brewkb(kb, "import", str(traces[mode]), "--format", fmt, "--run", "labelled",
                  "--outcomes", str(tmp_path / "labels.csv"), "--json")
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["unlabelled"], json.loads(done.stdout)["success_rate"]) == (0, 0.5)
    labelled = {t.task_id: t.success for t in read_jsonl(kb / "runs" / "labelled" / "rollouts.jsonl")}
    assert labelled == {i: bool(n % 2) for n, i in enumerate(ids)}


@pytest.mark.parametrize("every_call", [True, False])
def test_a_trace_whose_model_calls_name_the_tools_they_offered_learns_from_no_call_of_another(
        traces: dict[str, Path], kb: Path, tmp_path: Path, every_call: bool) -> None:
    """Here the agent was offered no ``return_order``, so the traces' calls of it were made up; a call that
    recorded an empty list offered no tool."""
    offered = json.dumps([{"type": "function", "name": name, "parameters": {"type": "object"}}
                          for name in ("find_order", "cancel_order")])
    logs = _offering(traces, tmp_path, [offered] if every_call else [offered, "[]", offered])
    assert brewkb(kb, "import", str(logs), "--format", "otel", "--run", "o").returncode == 0
    assert all(t.meta["tools"] == ["cancel_order", "find_order"]
               for t in read_jsonl(kb / "runs" / "o" / "rollouts.jsonl"))
    done = brewkb(kb, "distill", "o", "--iterations", "1")
    assert done.returncode == 0, done.stderr
    changed = set(git(kb, "diff", "--name-only", "HEAD", "brew/o/pr").split())
    assert "recipes/cancel-order.md" in changed and "recipes/return-order.md" not in changed
    assert not any("return_order" in git(kb, "show", f"brew/o/pr:{f}") for f in changed)


def test_tool_definitions_brewkb_cannot_read_skip_their_conversation(traces: dict[str, Path], kb: Path,
                                                                    tmp_path: Path) -> None:
    logs = _offering(traces, tmp_path, ['[{"type": "function", "name": "find_order"'])
    refused = brewkb(kb, "import", str(logs), "--format", "otel", "--run", "o")
    assert refused.returncode == 1 and "gen_ai.tool.definitions is not JSON" in refused.stderr
    skipped = brewkb(kb, "import", str(logs), "--format", "otel", "--run", "o", "--skip-bad")
    assert skipped.returncode == 1 and "nothing to import from" in skipped.stderr  # every conversation skipped


def test_traces_distil_into_a_pr_and_the_pr_counts_the_unlabelled(traces: dict[str, Path], kb: Path) -> None:
    assert brewkb(kb, "import", str(traces["genai"]), "--format", "otel", "--run", "traced").returncode == 0
    done = brewkb(kb, "distill", "traced", "--iterations", "1")
    assert done.returncode == 0, done.stderr
    changed = git(kb, "diff", "--name-only", "HEAD", "brew/traced/pr").split()
    assert {"recipes/cancel-order.md", "recipes/return-order.md"} <= set(changed)
    body = git(kb, "log", "-1", "--format=%B", "brew/traced/pr")
    assert "0 of 10 trajectories carry a reward or label; 0 unlabelled ones were graded by the judge; " \
           "10 are unlabelled" in body
    cancel = git(kb, "show", "brew/traced/pr:recipes/cancel-order.md")
    assert "find_order" in cancel and "cancel_order" in cancel


def test_an_endpoint_judges_unknown_outcomes_and_plan_counts_them(traces: dict[str, Path], kb: Path) -> None:
    config = kb / "brewkb.toml"
    config.write_text(config.read_text().replace('backend = "offline"', 'backend = "openai"', 1))
    git(kb, "commit", "-qam", "use an endpoint")
    assert brewkb(kb, "import", str(traces["openinference"]), "--format", "openinference", "--run", "oi"
                  ).returncode == 0
    with FakeOpenAI(default=role_player, embed=embed) as fake:
        env = {**os.environ, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
        plan = brewkb(kb, "distill", "oi", "--plan", "--json", env=env)
        assert plan.returncode == 0, plan.stderr
        assert fake.count == 0  # a plan calls nothing
        planned = json.loads(plan.stdout)
        assert planned["unlabelled"] == 10 and planned["calls"]["judge"] >= 2 * 10 + 2 * 10
        done = brewkb(kb, "distill", "oi", "--iterations", "1", env=env)
        assert done.returncode == 0, done.stderr
        asked = [b for _, b in fake.requests if (b.get("response_format") or {}).get("json_schema", {}).get(
            "name") == "outcome"]
    assert len(asked) == 10
    logged = list(read_jsonl(kb / "runs" / "oi" / "rollouts.jsonl"))
    assert sorted((t.task, t.success) for t in logged) == sorted(
        (re.sub(r"#W\d+", "<order_id>", c[0]), not c[3]) for c in CONVERSATIONS)
    assert all(t.outcome.detail["graded_by"] == "judge" for t in logged)
    body = git(kb, "log", "-1", "--format=%B", "brew/oi/pr")
    assert "10 unlabelled ones were graded by the judge; 0 are unlabelled" in body

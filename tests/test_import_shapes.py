"""Every shape of tau2 results, unlabelled logs, outcomes files, progress,
and records of any shape or depth: all through the ``brewkb`` CLI."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from brewkb.trajectories.formats import import_file
from brewkb.trajectories.schema import Trajectory, read_jsonl
from tests.conftest import git, told_from
from tests.test_distill import write_logs

TAU2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "tau2-airline" / \
    "claude-sonnet-4-5_airline_default_gpt4.1_1trials.json"
needs_tau2 = pytest.mark.skipif(not TAU2.is_file(), reason="needs ../shared/data/tau2-airline")


def brewkb(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    root.mkdir()
    assert brewkb(root, "init").returncode == 0
    return root


def imported(kb: Path, run: str) -> list[Any]:
    return list(read_jsonl(kb / "runs" / run / "rollouts.jsonl"))


# ------------------------------------------------------------------ tau2 shapes
def tau2_variants(folder: Path) -> dict[str, tuple[Path, int]]:
    """The published shapes, built from the real results file: (file, unlabelled simulations)."""
    real = json.loads(TAU2.read_text())
    sims = real["simulations"]
    nulls = copy.deepcopy(sims)
    for sim in nulls[:7]:
        sim["reward_info"] = None
    for sim in nulls[7:10]:
        sim["reward_info"] = {"reward": None, "info": "evaluation skipped"}
    out = {
        "object": ({**real}, 0),
        "bare list": (sims, 0),
        "bare list, rewards null": (nulls, 10),
        "object, rewards null": ({**real, "simulations": nulls}, 10),
        "no task list": ({k: v for k, v in real.items() if k != "tasks"}, 0),
        "tasks of other ids": ({**real, "tasks": [{**t, "id": f"other-{t['id']}"} for t in real["tasks"]]}, 0),
        "tasks of some ids": ({**real, "tasks": real["tasks"][:5]}, 0),
    }
    files = {}
    for n, (name, (value, unlabelled)) in enumerate(out.items()):
        path = folder / f"results-{n}.json"
        path.write_text(json.dumps(value))
        files[name] = (path, unlabelled)
    return files


@needs_tau2
def test_every_tau2_results_shape_imports_whole(kb: Path, tmp_path: Path) -> None:
    real = json.loads(TAU2.read_text())
    by_id = {t["id"]: t for t in real["tasks"]}
    for n, (name, (path, unlabelled)) in enumerate(tau2_variants(tmp_path).items()):
        done = brewkb(kb, "import", str(path), "--format", "tau2", "--run", f"v{n}", "--json")
        assert done.returncode == 0, (name, done.stderr)
        summary = json.loads(done.stdout)
        assert (summary["imported"], summary["skipped"], summary["unlabelled"]) == (50, 0, unlabelled), name
        trajectories = imported(kb, f"v{n}")
        assert [t.meta["simulation_id"] for t in trajectories] == [s["id"] for s in real["simulations"]], name
        assert sum(t.success is None for t in trajectories) == unlabelled, name
        first = trajectories[0]
        instruction = by_id[first.task_id]["user_scenario"]["instructions"]["reason_for_call"]
        # the task text comes from the task list when it names the simulation's task, else its first user turn
        if name in ("no task list", "tasks of other ids") or name.startswith("bare"):
            assert first.task == next(m["content"] for m in first.messages if m["role"] == "user"), name
        elif name != "tasks of some ids":
            assert first.task.startswith(instruction), name
    assert brewkb(kb, "import", str(path), "--format", "tau-bench").returncode == 1  # still refused as another format


@needs_tau2
def test_a_tau2_tasks_file_gives_the_task_text(kb: Path, tmp_path: Path) -> None:
    real = json.loads(TAU2.read_text())
    (tmp_path / "bare.json").write_text(json.dumps(real["simulations"]))
    (tmp_path / "tasks.json").write_text(json.dumps(real["tasks"]))
    done = brewkb(kb, "import", str(tmp_path / "bare.json"), "--format", "tau2", "--tasks",
                  str(tmp_path / "tasks.json"), "--run", "t")
    assert done.returncode == 0, done.stderr
    by_id = {t["id"]: t for t in real["tasks"]}
    read = {t.task_id: t for t in import_file(tmp_path / "bare.json", "tau2", tasks=tmp_path / "tasks.json")
            if isinstance(t, Trajectory)}
    for t in imported(kb, "t"):
        assert read[t.task_id].task.startswith(by_id[t.task_id]["user_scenario"]["instructions"]["reason_for_call"])
        assert told_from(t.task, read[t.task_id].task)  # as the log told it, without personal data


# ------------------------------------------------------- unlabelled and outcomes
def unlabelled_chat(folder: Path) -> Path:
    """The support-desk logs of test_distill without any label."""
    _, chat = write_logs(folder)
    rows = [json.loads(line) for line in chat.read_text().splitlines()]
    out = folder / "unlabelled.jsonl"
    out.write_text("".join(json.dumps({"id": f"conv-{n}", "task_id": r["task_id"], "messages": r["messages"]}) + "\n"
                           for n, r in enumerate(rows)))
    return out


def test_an_unlabelled_log_distils_and_the_pr_says_so(kb: Path, tmp_path: Path) -> None:
    log = unlabelled_chat(tmp_path)
    done = brewkb(kb, "import", str(log), "--format", "openai", "--run", "logs")
    assert done.returncode == 0, done.stderr
    assert "no outcome known, 18 unlabelled" in done.stdout
    distilled = brewkb(kb, "distill", "logs", "--iterations", "1")
    assert distilled.returncode == 0, distilled.stderr
    changed = git(kb, "diff", "--name-only", "HEAD", "brew/logs/pr").split()
    assert "recipes/cancel-pending-order.md" in changed
    body = git(kb, "log", "-1", "--format=%B", "brew/logs/pr")
    assert "0 of 18 trajectories carry a reward or label" in body and "18 are unlabelled" in body
    insights = [json.loads(line) for line in (kb / "runs" / "logs" / "reflections.jsonl").read_text().splitlines()]
    assert insights and {i["polarity"] for i in insights} <= {"observed", "diagnostic"}
    assert not any(i["insight"].startswith(("A passing run", "A run that changed nothing failed")) for i in insights)
    assert any(i["insight"].startswith("A run whose outcome is unknown did:") for i in insights)
    cancel = git(kb, "show", "brew/logs/pr:recipes/cancel-pending-order.md")
    assert "cancel_pending_order" in cancel


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_outcomes_attach_labels_and_relabel_without_duplicates(kb: Path, tmp_path: Path, kind: str) -> None:
    log = unlabelled_chat(tmp_path)
    assert brewkb(kb, "import", str(log), "--format", "openai", "--run", "logs").returncode == 0
    rows = [("conv-0", "true", ""), ("conv-1", "", "0.25"), ("conv-2", "no", ""), ("conv-99", "yes", "")]
    if kind == "csv":
        labels = tmp_path / "feedback.csv"
        labels.write_text("conversation_id,success,score\n" + "".join(",".join(r) + "\n" for r in rows))
    else:
        labels = tmp_path / "feedback.jsonl"
        labels.write_text("".join(json.dumps({"conversation_id": i, **({"success": s in ("true", "yes")} if s else {}),
                                              **({"score": float(v)} if v else {})}) + "\n" for i, s, v in rows))
    done = brewkb(kb, "import", str(log), "--format", "openai", "--run", "logs", "--outcomes", str(labels), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["imported"], summary["labels_attached"], summary["relabelled"], summary["unmatched_labels"],
            summary["unlabelled"]) == (3, 3, 3, 1, 0)
    assert done.stderr.strip() == f"warning: 1 id of {labels} match no imported conversation: conv-99"
    logged = imported(kb, "logs")
    assert len(logged) == 18  # labelled in place, no duplicate
    by_conv = {t.meta["conversation_id"]: t for t in logged}
    assert (by_conv["conv-0"].success, by_conv["conv-1"].success, by_conv["conv-2"].success) == (True, False, False)
    assert by_conv["conv-1"].outcome.score == 0.25 and by_conv["conv-3"].success is None
    assert by_conv["conv-0"].outcome.detail["label"] == f"outcomes file {labels.name}"
    again = brewkb(kb, "import", str(log), "--format", "openai", "--run", "logs", "--outcomes", str(labels), "--json")
    assert json.loads(again.stdout)["imported"] == 0 and len(imported(kb, "logs")) == 18
    plain = brewkb(kb, "import", str(log), "--format", "openai", "--run", "logs", "--json")  # the unlabelled log again
    assert json.loads(plain.stdout)["imported"] == 0
    assert [t.success for t in imported(kb, "logs")] == [t.success for t in logged]  # no label is lost
    one = tmp_path / "one.csv"
    one.write_text("conversation_id,success\nconv-3,true\n")
    said = brewkb(kb, "import", str(log), "--format", "openai", "--run", "logs", "--outcomes", str(one)).stdout
    assert said.splitlines()[0] == "Imported 1 trajectory into run logs (success rate 100.0%); skipped 0."
    assert said.splitlines()[-1] == "Labels from one.csv: attached to 1 conversation (1 already in the run relabelled)."


def test_chat_lines_that_name_no_task_are_tasks_of_their_own_across_files(kb: Path, tmp_path: Path) -> None:
    _, chat = write_logs(tmp_path)
    rows = [json.loads(line) for line in chat.read_text().splitlines()]
    days = [tmp_path / "monday.jsonl", tmp_path / "tuesday.jsonl"]
    for day, part in zip(days, (rows[0::2], rows[1::2]), strict=True):  # one trial of each task a day
        day.write_text("".join(json.dumps({"messages": r["messages"], "success": r["success"]}) + "\n" for r in part))
    for day in days:
        assert brewkb(kb, "import", str(day), "--format", "openai", "--run", "logs").returncode == 0
    logged = imported(kb, "logs")
    distinct = {json.dumps(t.messages, sort_keys=True) for t in logged}
    assert len(logged) == 18 and len({t.task_id for t in logged}) == len(distinct) > 9  # line 1 of each day is not one task
    again = json.loads(brewkb(kb, "import", str(days[0]), "--format", "openai", "--run", "logs", "--json").stdout)
    assert (again["imported"], again["already"]) == (0, 9)
    rollouts = kb / "runs" / "logs" / "rollouts.jsonl"  # as an import before task ids held a digest wrote it
    rollouts.write_text("".join(json.dumps({**t.to_json(), "task_id": f"line-{t.meta['line']}",
                                            "meta": {k: v for k, v in t.meta.items() if k != "unnamed_task"}}) + "\n"
                                for t in logged))
    for day in days:
        done = json.loads(brewkb(kb, "import", str(day), "--format", "openai", "--run", "logs", "--json").stdout)
        assert (done["imported"], done["already"]) == (0, 9)


def test_a_bad_outcomes_file_changes_nothing(kb: Path, tmp_path: Path) -> None:
    log = unlabelled_chat(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("conversation_id,success\nconv-0,true\nconv-1,maybe\n")
    failed = brewkb(kb, "import", str(log), "--format", "openai", "--run", "logs", "--outcomes", str(bad))
    assert failed.returncode == 1
    assert failed.stderr.strip() == f"brewkb: error: {bad}:3: `success` must be true or false, got 'maybe'"
    assert not (kb / "runs" / "logs").exists()
    nameless = tmp_path / "nameless.csv"
    nameless.write_text("who,success\nconv-0,true\n")
    failed = brewkb(kb, "import", str(log), "--format", "openai", "--outcomes", str(nameless))
    assert failed.stderr.strip() == (f"brewkb: error: {nameless}:1: no id column in the header; name one "
                                     "conversation_id, id, trace_id, task_id")  # the header's line
    huge = tmp_path / "huge.jsonl"
    huge.write_text('{"conversation_id": "conv-0", "score": 1' + "0" * 400 + "}\n")
    failed = brewkb(kb, "import", str(log), "--format", "openai", "--run", "logs", "--outcomes", str(huge))
    assert failed.returncode == 1 and failed.stderr.startswith(f"brewkb: error: {huge}:1: `score` must be a number")


@pytest.mark.parametrize("reward", ["1e999", "-1e999", "1" + "0" * 400])
def test_a_reward_that_is_no_finite_number_refuses_its_record(kb: Path, tmp_path: Path, reward: str) -> None:
    path = tmp_path / "rewards.jsonl"
    path.write_text(json.dumps({**GOOD, "success": None}).replace('"success": null', f'"reward": {reward}') + "\n")
    failed = brewkb(kb, "import", str(path), "--format", "openai", "--run", "logs")
    assert failed.returncode == 1 and "`reward` must be a finite number" in failed.stderr, failed.stderr
    assert not (kb / "runs" / "logs").exists()


def test_a_large_import_reports_progress(kb: Path, tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    lines = [{"task_id": f"t{n}", "messages": [{"role": "user", "content": f"hi {n}"},
                                               {"role": "assistant", "content": "hello"}]} for n in range(2500)]
    big.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = brewkb(kb, "import", str(big), "--format", "openai", "--run", "big", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["import: 1,000 records read, 1,000 new, 0 skipped",
                                        "import: 2,000 records read, 2,000 new, 0 skipped"]
    assert json.loads(done.stdout)["imported"] == 2500


# -------------------------------------------------------- any shape, any depth
def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": [value]}
    return value


GOOD = {"task_id": "t1", "messages": [{"role": "user", "content": "Cancel order 7"},
                                      {"role": "assistant", "content": "Done."}], "success": True}


def test_one_json_array_given_as_openai_is_told_it_needs_json_lines(kb: Path, tmp_path: Path) -> None:
    path = tmp_path / "chats.json"
    path.write_text(json.dumps([GOOD, {**GOOD, "task_id": "t2"}], indent=2))
    refused = brewkb(kb, "import", str(path), "--format", "openai", "--run", "arr")
    assert refused.returncode == 1 and not (kb / "runs" / "arr").exists()
    assert refused.stderr.strip() == (f"brewkb: error: {path}: `openai` reads JSON lines, one conversation object per "
                                      'line ({"messages": [...]}); this file is one JSON array: '
                                      "`jq -c '.[]' FILE > FILE.jsonl` writes one conversation per line")
    lists = tmp_path / "lists.jsonl"  # each line a bare list of messages: the other fix
    lists.write_text("".join(json.dumps(line["messages"]) + "\n" for line in (GOOD, GOOD)))
    refused = brewkb(kb, "import", str(lists), "--format", "openai", "--run", "arr")
    assert refused.returncode == 1 and "`jq -c '{messages: .}' FILE > FILE.jsonl` wraps them" in refused.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"task_id": "t1", "messages": [{"role": "user", "content": "hi}]}')  # no line end
    refused = brewkb(kb, "import", str(broken), "--format", "openai", "--run", "arr")
    assert "not JSON (Unterminated string starting at column " in refused.stderr


def test_a_record_nested_ten_thousand_deep_is_a_numbered_error(kb: Path, tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    text = "[" * 10_000 + "]" * 10_000
    path.write_text(json.dumps(GOOD) + "\n" + text + "\n" + json.dumps({**GOOD, "task_id": "t2"}) + "\n"
                    + json.dumps({**GOOD, "task_id": "t3", "meta": deep(300)}) + "\n"  # 600 levels: refused
                    + json.dumps({**GOOD, "task_id": "t4", "meta": deep(50)}) + "\n")  # 100 levels: read
    failed = brewkb(kb, "import", str(path), "--format", "openai", "--run", "deep")
    assert failed.returncode == 1, failed.stderr
    assert failed.stderr.strip() == (f"brewkb: error: {path}:2: nested more than 200 levels deep (nothing was "
                                     "imported; use --skip-bad to skip bad records)")
    assert not (kb / "runs" / "deep").exists()
    skipped = brewkb(kb, "import", str(path), "--format", "openai", "--run", "deep", "--json", "--skip-bad")
    assert skipped.returncode == 0, skipped.stderr
    assert (json.loads(skipped.stdout)["imported"], json.loads(skipped.stdout)["skipped"]) == (3, 2)


def test_tool_call_arguments_nested_deep_inside_their_string_are_a_numbered_error(kb: Path, tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "cancel_order",
                                                         "arguments": '{"a": ' + "[" * 3_000 + "]" * 3_000 + "}"}}
    bad = {"task_id": "t2", "success": True, "messages": [{"role": "user", "content": "Cancel order 2."},
                                                          {"role": "assistant", "content": None, "tool_calls": [call]}]}
    path = tmp_path / "deep-arguments.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    failed = brewkb(kb, "import", str(path), "--format", "openai", "--run", "deep")
    assert failed.returncode == 1 and not (kb / "runs" / "deep").exists()
    assert failed.stderr.strip() == (f"brewkb: error: {path}:2: messages[1].tool_calls[0].function.arguments: nested "
                                     "more than 200 levels deep (nothing was imported; use --skip-bad to skip bad "
                                     "records)")
    skipped = json.loads(brewkb(kb, "import", str(path), "--format", "openai", "--run", "deep", "--json",
                                "--skip-bad").stdout)
    assert (skipped["imported"], skipped["skipped"]) == (1, 1)


@pytest.mark.parametrize("fmt", ["tau-bench", "tau2", "otel", "openinference"])
def test_deep_records_in_json_documents_are_numbered_errors(kb: Path, tmp_path: Path, fmt: str) -> None:
    nested = deep(10_000)
    documents = {
        "tau-bench": [nested, {"task_id": 1, "reward": 1.0, "traj": GOOD["messages"]}],
        "tau2": {"simulations": [nested, {"id": "s", "task_id": "1", "messages": GOOD["messages"],
                                          "reward_info": {"reward": 1.0}}]},
        "otel": {"resourceSpans": [nested]},
        "openinference": {"resourceSpans": [nested]},
    }
    path = tmp_path / "deep.json"
    path.write_text(_dump(documents[fmt]))  # json.dumps itself cannot go this deep
    failed = brewkb(kb, "import", str(path), "--format", fmt, "--run", "deep")
    assert failed.returncode == 1, failed.stderr
    assert "nested more than 200 levels deep" in failed.stderr and "Traceback" not in failed.stderr
    assert failed.stderr.startswith(f"brewkb: error: {path}")


def _dump(value: Any) -> str:
    """JSON of any depth, without recursion."""
    out: list[str] = []
    stack: list[Any] = [("value", value)]
    while stack:
        kind, item = stack.pop()
        if kind == "text":
            out.append(item)
        elif isinstance(item, dict):
            parts: list[Any] = [("text", "}")]
            for n, (k, v) in enumerate(reversed(list(item.items()))):
                parts.append(("value", v))
                parts.append(("text", json.dumps(k) + ":"))
                if n < len(item) - 1:
                    parts.append(("text", ","))
            stack.extend(parts)
            out.append("{")
        elif isinstance(item, list):
            parts = [("text", "]")]
            for n, v in enumerate(reversed(item)):
                parts.append(("value", v))
                if n < len(item) - 1:
                    parts.append(("text", ","))
            stack.extend(parts)
            out.append("[")
        else:
            out.append(json.dumps(item))
    return "".join(out)


SHAPES: list[Any] = [None, True, 3, -1.5, "text", [], {}, [[]], [None], {"": None}, ["a", 1], {"x": {"y": []}}]


def mutations(record: dict[str, Any]) -> list[Any]:
    """``record`` with each value (at every depth) replaced by every shape in ``SHAPES``."""
    out: list[Any] = list(SHAPES)
    paths: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), record)]
    while stack:
        path, value = stack.pop()
        if path:
            paths.append(path)
        if isinstance(value, dict):
            stack.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((path + (i,), v) for i, v in enumerate(value))
    for path in paths:
        for shape in SHAPES:
            changed = copy.deepcopy(record)
            target = changed
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = shape
            out.append(changed)
    return out


SPAN = {"traceId": "a" * 32, "spanId": "b" * 16, "name": "chat m", "startTimeUnixNano": "1", "attributes": [
    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
    {"key": "gen_ai.input.messages", "value": {"stringValue": json.dumps(
        [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])}},
    {"key": "llm.input_messages.0.message.role", "value": {"stringValue": "user"}},
    {"key": "llm.input_messages.0.message.content", "value": {"stringValue": "hi"}},
    {"key": "gen_ai.output.messages", "value": {"arrayValue": {"values": [{"kvlistValue": {"values": [
        {"key": "role", "value": {"stringValue": "assistant"}},
        {"key": "parts", "value": {"arrayValue": {"values": [{"kvlistValue": {"values": [
            {"key": "type", "value": {"stringValue": "tool_call"}}, {"key": "name", "value": {"stringValue": "f"}},
            {"key": "id", "value": {"stringValue": "c1"}},
            {"key": "arguments", "value": {"kvlistValue": {"values": []}}}]}}]}}}]}}]}}}],
    "events": [{"name": "gen_ai.choice", "attributes": [{"key": "index", "value": {"intValue": "0"}}]}]}
LOG = {"traceId": "a" * 32, "spanId": "b" * 16, "eventName": "gen_ai.user.message",
       "body": {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": "hi"}}]}}}
TAU2_SIM = {"id": "s1", "task_id": "1", "trial": 0, "reward_info": {"reward": 1.0}, "messages": [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "name": "f", "arguments": {"a": 1},
                                                           "requestor": "assistant"}]},
    {"role": "tool", "id": "c", "content": "ok", "requestor": "assistant"}]}


@pytest.mark.parametrize("fmt", ["openai", "tau-bench", "tau2", "otel", "openinference"])
def test_records_of_any_shape_never_crash_an_import(kb: Path, tmp_path: Path, fmt: str) -> None:
    """Every value of a valid record, at every depth, replaced by values of
    every JSON type: each record imports or is a numbered error; never exit 3."""
    if fmt == "openai":
        lines = [json.dumps(r) for r in mutations({**GOOD, "messages": GOOD["messages"] + [
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"}]})]
        text = "\n".join(lines) + "\n"
    elif fmt == "tau-bench":
        text = json.dumps(mutations({"task_id": 1, "trial": 0, "reward": 1.0, "traj": GOOD["messages"],
                                     "info": {"task": {"instruction": "x", "user_id": "u"}}}))
    elif fmt == "tau2":
        text = json.dumps({"tasks": [{"id": "1", "user_scenario": {"instructions": "x"}}],
                           "simulations": mutations(TAU2_SIM)})
    else:
        requests = [{"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]} for span in mutations(SPAN)]
        requests += [{"resourceLogs": [{"scopeLogs": [{"logRecords": [log]}]}]} for log in mutations(LOG)]
        requests += [{"resourceSpans": shape} for shape in SHAPES] + [{"resourceSpans": [{"scopeSpans": shape}]}
                                                                      for shape in SHAPES]
        text = "".join(json.dumps(r) + "\n" for r in requests)
    path = tmp_path / "shapes.json"
    path.write_text(text)
    done = brewkb(kb, "import", str(path), "--format", fmt, "--run", "shapes", "--skip-bad", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["imported"] >= 1 and summary["skipped"] >= 1
    strict = brewkb(kb, "import", str(path), "--format", fmt, "--run", "strict")
    assert strict.returncode == 1 and strict.stderr.startswith(f"brewkb: error: {path}"), strict.stderr[-2000:]


def test_a_success_written_as_one_or_zero_is_read_as_an_outcomes_file_reads_it(kb: Path, tmp_path: Path) -> None:
    path = tmp_path / "numbers.jsonl"
    path.write_text("".join(json.dumps({**GOOD, "task_id": f"t{n}", "success": n}) + "\n" for n in (1, 0)))
    done = brewkb(kb, "import", str(path), "--format", "openai", "--run", "nums")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (kb / "runs" / "nums" / "rollouts.jsonl").read_text().splitlines()]
    assert [r["outcome"]["success"] for r in sorted(rows, key=lambda r: r["task_id"])] == [False, True]
    path.write_text(json.dumps({**GOOD, "success": 2}) + "\n")
    refused = brewkb(kb, "import", str(path), "--format", "openai", "--run", "two")
    assert refused.returncode == 1 and "`success` must be true or false (or 1 or 0), got 2" in refused.stderr

"""Importers for trajectories that already exist, one function per format.

Each importer yields ``Trajectory`` values or ``Skipped`` items (a record it
could not convert, with the reason); it never writes anything. ``sniff`` names
the format a file looks like, so a wrong ``--format`` gets a useful error.

    openai     JSONL of {messages, success | reward, task?, task_id?}
    tau-bench  JSON array of {task_id, trial, reward, traj, info{task{instruction}}}
    tau2       tau2-bench results.json: {tasks[], simulations[{task_id, trial, messages, reward_info}]}
    osworld    a results folder: <domain>/<example_id>/traj.jsonl and result.txt
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.errors import TrajectoryError
from brewkb.trajectories.schema import Outcome, Trajectory

__all__ = ["Skipped", "IMPORTERS", "import_file", "sniff"]


@dataclass(frozen=True)
class Skipped:
    where: str
    reason: str


Item = Trajectory | Skipped
Importer = Callable[[Path, str, Path | None], Iterator[Item]]


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TrajectoryError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); {_looks_like(path)}") from None
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read ({exc.strerror})") from None


def _first_user(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def _outcome(reward: Any, success: Any = None) -> Outcome:
    if isinstance(success, bool):
        return Outcome(success, float(reward) if isinstance(reward, int | float) else float(success))
    if not isinstance(reward, int | float) or isinstance(reward, bool):
        raise TrajectoryError(f"needs `success` (true/false) or a numeric `reward`, got {reward!r}")
    return Outcome(reward >= 1.0, float(reward))


def _build(where: str, **fields: Any) -> Item:
    try:
        return Trajectory.from_json(fields)
    except TrajectoryError as exc:
        return Skipped(where, str(exc))


def import_openai(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise TrajectoryError("a line must be a JSON object")
                outcome = _outcome(record.get("reward"), record.get("success"))
            except (json.JSONDecodeError, TrajectoryError) as exc:
                yield Skipped(where, str(exc))
                continue
            messages = record.get("messages")
            task = record.get("task") or (_first_user(messages) if isinstance(messages, list) else "")
            yield _build(where, task_id=str(record.get("task_id") or f"line-{number}"), task=task, split=split,
                         messages=messages, outcome={"success": outcome.success, "score": outcome.score},
                         meta={"source": "openai", "line": number})


def import_tau_bench(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    data = _load_json(path)
    if not isinstance(data, list):
        raise TrajectoryError(f"{path}: a tau-bench file is a JSON array of runs; {_looks_like(path)}")
    for i, run in enumerate(data):
        where = f"{path}[{i}]"
        if not isinstance(run, dict) or "traj" not in run:
            yield Skipped(where, "not a tau-bench run (no `traj`)")
            continue
        try:
            outcome = _outcome(run.get("reward"))
        except TrajectoryError as exc:
            yield Skipped(where, str(exc))
            continue
        task = (run.get("info") or {}).get("task") or {}
        traj = run["traj"]
        yield _build(where, task_id=str(run.get("task_id", i)), task=task.get("instruction") or _first_user(traj),
                     split=split, messages=traj, outcome={"success": outcome.success, "score": outcome.score},
                     meta={"source": "tau-bench", "trial": run.get("trial"), "user_id": task.get("user_id")})


def _tau2_messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """tau2 messages → OpenAI messages; tool calls the *user* made go to meta."""
    out: list[dict[str, Any]] = []
    user_calls: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            if m.get("requestor", "assistant") == "user":
                user_calls.append({"result": m.get("content"), "id": m.get("id")})
                continue
            out.append({"role": "tool", "tool_call_id": m.get("id", ""), "content": m.get("content") or ""})
            continue
        message: dict[str, Any] = {"role": role, "content": m.get("content")}
        calls = []
        for c in m.get("tool_calls") or []:
            if role == "user" or c.get("requestor") == "user":
                user_calls.append({"name": c.get("name"), "arguments": c.get("arguments")})
                continue
            args = c.get("arguments")
            calls.append({"id": c.get("id", ""), "type": "function",
                          "function": {"name": c.get("name", ""),
                                       "arguments": args if isinstance(args, str) else json.dumps(args)}})
        if calls:
            message["tool_calls"] = calls
        if message["content"] is not None or calls:
            out.append(message)
    return out, user_calls


def _tau2_task_text(task: dict[str, Any]) -> str:
    instructions = (task.get("user_scenario") or {}).get("instructions")
    if isinstance(instructions, str):
        return instructions
    if isinstance(instructions, dict):
        parts = [instructions.get(k) for k in ("reason_for_call", "known_info", "task_instructions")]
        return "\n".join(str(p) for p in parts if p)
    description = task.get("description") or {}
    return str(description.get("purpose") or "") if isinstance(description, dict) else str(description)


def import_tau2(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("simulations"), list):
        raise TrajectoryError(f"{path}: a tau2 results file has a `simulations` list; {_looks_like(path)}")
    texts = {str(t.get("id")): _tau2_task_text(t) for t in data.get("tasks") or [] if isinstance(t, dict)}
    for i, sim in enumerate(data["simulations"]):
        where = f"{path}:simulations[{i}]"
        if not isinstance(sim, dict) or not isinstance(sim.get("messages"), list):
            yield Skipped(where, "no `messages` list")
            continue
        reward = (sim.get("reward_info") or {}).get("reward")
        try:
            outcome = _outcome(reward)
        except TrajectoryError as exc:
            yield Skipped(where, str(exc))
            continue
        messages, user_calls = _tau2_messages(sim["messages"])
        task_id = str(sim.get("task_id", i))
        yield _build(where, task_id=task_id, task=texts.get(task_id) or _first_user(messages), split=split,
                     messages=messages, outcome={"success": outcome.success, "score": outcome.score},
                     meta={"source": "tau2", "trial": sim.get("trial"), "simulation_id": sim.get("id"),
                           "user_tool_calls": user_calls})


def _osworld_task(tasks: Path | None, domain: str, example: str) -> str:
    if tasks is None:
        return ""
    for candidate in (tasks / domain / f"{example}.json", tasks / "examples" / domain / f"{example}.json"):
        if candidate.is_file():
            return str(json.loads(candidate.read_text(encoding="utf-8")).get("instruction") or "")
    found = next(tasks.rglob(f"{example}.json"), None)
    return str(json.loads(found.read_text(encoding="utf-8")).get("instruction") or "") if found else ""


def import_osworld(path: Path, split: str, tasks: Path | None = None) -> Iterator[Item]:
    if not path.is_dir():
        raise TrajectoryError(f"{path}: an OSWorld results folder is a directory; {_looks_like(path)}")
    for traj_file in sorted(path.rglob("traj.jsonl")):
        folder = traj_file.parent
        domain, example = folder.parent.name, folder.name
        where = str(folder)
        try:
            score = float((folder / "result.txt").read_text().strip())
        except (OSError, ValueError):
            yield Skipped(where, "no readable result.txt (the episode did not finish)")
            continue
        task = _osworld_task(tasks, domain, example) or f"OSWorld task {domain}/{example}"
        messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
        for number, line in enumerate(traj_file.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                step = json.loads(line)
            except json.JSONDecodeError:
                yield Skipped(f"{traj_file}:{number}", "not JSON")
                break
            call_id = f"step-{step.get('step_num', number)}"
            action = step.get("action")
            messages.append({"role": "assistant", "content": str(step.get("response") or ""), "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "computer", "arguments": json.dumps({"action": action})}}]})
            observation = {"reward": step.get("reward"), "done": step.get("done"), "info": step.get("info")}
            messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(observation)})
        else:
            yield _build(where, task_id=f"{domain}/{example}", task=task, split=split, messages=messages,
                         outcome={"success": score >= 1.0, "score": score},
                         meta={"source": "osworld", "domain": domain})


IMPORTERS: dict[str, Importer] = {
    "openai": import_openai,
    "tau-bench": import_tau_bench,
    "tau2": import_tau2,
    "osworld": import_osworld,
}


def sniff(path: Path) -> str | None:
    """The format ``path`` looks like, or ``None``."""
    if path.is_dir():
        return "osworld" if next(path.rglob("traj.jsonl"), None) else None
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:200_000]
    except OSError:
        return None
    text = head.lstrip()
    if text.startswith("[") and '"traj"' in text[:50_000]:
        return "tau-bench"
    if text.startswith("{") and '"simulations"' in text:
        return "tau2"
    try:
        line = json.loads(text.split("\n", 1)[0])
    except json.JSONDecodeError:
        return None
    return "openai" if isinstance(line, dict) and "messages" in line else None


def _looks_like(path: Path) -> str:
    guess = sniff(path)
    return f"it looks like `{guess}`: try --format {guess}" if guess else "its format is not one brewkb reads"


def import_file(path: Path, fmt: str, split: str = "train", tasks: Path | None = None) -> Iterator[Item]:
    if fmt not in IMPORTERS:
        raise TrajectoryError(f"unknown format {fmt!r}; choose one of {', '.join(IMPORTERS)}")
    if not path.exists():
        raise TrajectoryError(f"{path}: no such file or folder")
    guess = sniff(path)
    if guess is not None and guess != fmt:
        raise TrajectoryError(f"{path} does not look like `{fmt}`: it looks like `{guess}`; use --format {guess}")
    return IMPORTERS[fmt](path, split, tasks)

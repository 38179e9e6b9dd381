"""Helpers for tests on the real SpreadsheetBench sample: solutions that write the
known answers, and trajectories that submit code through ``run_python``."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from brewkb.envs.spreadsheetbench import SheetTask
from brewkb.trajectories.schema import Outcome, Trajectory
from tests.conftest import SHARED

SAMPLE = SHARED / "spreadsheetbench-sample"

# the sandbox tests run for real on CI (.ci/run installs bubblewrap); elsewhere they need it installed
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed: apt-get install -y bubblewrap")


def answer_code(task: SheetTask) -> str:
    """Python that writes, for each test case's input, that case's answer workbook."""
    answers = {hashlib.sha256(c.input.read_bytes()).hexdigest(): base64.b64encode(c.answer.read_bytes()).decode()
               for c in task.cases}
    return ("import base64, hashlib, os\n"
            f"ANSWERS = {answers!r}\n"
            "key = hashlib.sha256(open(os.environ['INPUT_PATH'], 'rb').read()).hexdigest()\n"
            "open(os.environ['OUTPUT_PATH'], 'wb').write(base64.b64decode(ANSWERS[key]))\n")


def submitted(task_id: str, code: str) -> Trajectory:
    """A trajectory whose last ``run_python`` call is ``code``."""
    call = {"id": "c1", "type": "function", "function": {"name": "run_python", "arguments": json.dumps({"code": code})}}
    messages = ({"role": "user", "content": "solve"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "exit status: 0"},
                {"role": "assistant", "content": "done"})
    return Trajectory(task_id=task_id, task="solve", messages=messages, outcome=Outcome(False, 0.0))


def processes_with(token: str) -> list[int]:
    """Host processes whose command line holds ``token``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


COPY_INPUT = "import os, shutil\nshutil.copyfile(os.environ['INPUT_PATH'], os.environ['OUTPUT_PATH'])\n"


class SheetPolicy:
    """An agent policy for ``tests.fakes.roles.RolePlayer`` on the sample: it sends
    one ``run_python`` call — the known answers for tasks whose id sorts into the
    first half, a copy of the input for the rest — then says it is done."""

    def __init__(self, tasks: dict[str, SheetTask]) -> None:
        self.tasks = tasks
        ordered = sorted(tasks)
        self.solved = set(ordered[: len(ordered) // 2])

    def __call__(self, body: dict[str, object]) -> dict[str, object] | None:
        messages = body.get("messages") or []
        assert isinstance(messages, list)
        if any(m.get("role") == "tool" for m in messages):
            return {"content": "The workbook is saved to OUTPUT_PATH."}
        task_text = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        task_id = next((i for i, t in self.tasks.items() if task_text.startswith(t.instruction)), None)
        if task_id is None:
            return None
        code = answer_code(self.tasks[task_id]) if task_id in self.solved else COPY_INPUT
        return {"tool_calls": [{"id": f"call-{task_id}", "name": "run_python", "arguments": {"code": code}}]}

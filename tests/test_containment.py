"""Every process an agent program starts ends with its episode, through the
CLI: a PID namespace of its own contains it, and where the kernel refuses
one brewkb says so and falls back to its reaper."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import MakeRepo
from tests.test_agents import survivors

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PID namespaces are Linux's")

CONFIG = '[env]\nname = "shop"\noptions = {{ train = 2, eval = 1, test = 1 }}\n' \
         '[agent]\nname = "command"\ncommand = ["{python}", "{agent}"]\ntimeout = 60\n'

# Detaches a grandchild (new session, double fork) that clears its whole environment
# (so no per-episode marker is left on it) and sleeps; then the agent kills its reaper
# and answers. Only the kernel can still tell that the grandchild belongs to the episode.
HOSTILE = """
import json, os, signal, sys, time
req = json.load(sys.stdin)
ready = {ready!r} + "." + req["task_id"]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/usr/bin/env", ["env", "-i", sys.executable, "-c",
                                   "import time, sys; open(sys.argv[1], 'w').close(); time.sleep(600)",
                                   ready, {marker!r}], {{}})
    os._exit(0)
while not os.path.exists(ready):
    time.sleep(0.02)
os.kill(os.getppid(), signal.SIGKILL)
print(json.dumps({{"messages": [{{"role": "user", "content": req["task"]}},
                                {{"role": "assistant", "content": "done"}}]}}))
"""


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def test_an_agent_that_hides_from_markers_and_kills_its_reaper_leaves_nothing(make_repo: MakeRepo,
                                                                               tmp_path: Path) -> None:
    marker = f"brewkb-escapee-{os.getpid()}-{time.monotonic_ns()}"
    agent = tmp_path / "hostile.py"
    agent.write_text(HOSTILE.format(ready=str(tmp_path / "ready"), marker=marker))
    root = make_repo({"brewkb.toml": CONFIG.format(python=sys.executable, agent=agent), "recipes/.gitkeep": ""})
    out = subprocess.run([sys.executable, "-m", "brewkb", "rollout", "--run", "h", "--split", "train"], cwd=root,
                         capture_output=True, text=True, timeout=300)
    left = survivors(marker)
    _kill(left)
    assert list(tmp_path.glob("ready.*")), "the agent never started its grandchild"
    assert left == []
    assert "PID namespace" not in out.stderr  # bubblewrap contained it: no fallback was needed
    # killing its reaper ended the agent's whole namespace with it: the episodes failed, loudly
    assert out.returncode == 1 and "all 2 episodes failed to run" in out.stderr and "Traceback" not in out.stderr


def test_where_no_namespace_can_be_made_brewkb_says_so_and_uses_its_reaper(make_repo: MakeRepo,
                                                                           tmp_path: Path) -> None:
    refusing = tmp_path / "bin"
    refusing.mkdir()
    (refusing / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    (refusing / "bwrap").chmod(0o755)
    marker = f"brewkb-child-{os.getpid()}-{time.monotonic_ns()}"
    agent = tmp_path / "agent.py"
    agent.write_text(textwrap.dedent(f"""
        import json, subprocess, sys
        req = json.load(sys.stdin)
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", {marker!r}],
                         start_new_session=True)
        print(json.dumps({{"messages": [{{"role": "user", "content": req["task"]}},
                                        {{"role": "assistant", "content": "done"}}]}}))
    """))
    root = make_repo({"brewkb.toml": CONFIG.format(python=sys.executable, agent=agent), "recipes/.gitkeep": ""})
    env = {**os.environ, "PATH": f"{refusing}:{os.environ['PATH']}"}
    out = subprocess.run([sys.executable, "-m", "brewkb", "rollout", "--run", "f", "--split", "train"], cwd=root,
                         capture_output=True, text=True, env=env, timeout=300)
    left = survivors(marker)
    _kill(left)
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if "PID namespace" in line]
    assert len(warnings) == 1 and "No permissions" in warnings[0] and "reaper" in warnings[0]
    assert left == []  # the reaper still ends a child that keeps its environment


# A command agent that runs one run_python call through the episode's tool channel (copying
# the input to the output) and reports it; it touches `<ready>.<task>` once its call returned.
SHEET_AGENT = """
import json, sys, urllib.request
req = json.load(sys.stdin)
code = "import os, shutil\\nshutil.copyfile(os.environ['INPUT_PATH'], os.environ['OUTPUT_PATH'])\\n"
channel = req["tool_channel"]
call = urllib.request.Request(channel["url"] + "/call", method="POST",
                              data=json.dumps({{"name": "run_python", "arguments": {{"code": code}}}}).encode(),
                              headers={{"Authorization": "Bearer " + channel["token"],
                                        "Content-Type": "application/json"}})
seen = json.load(urllib.request.urlopen(call))["content"]
open({ready!r} + "." + req["task_id"], "w").close()
tool = {{"id": "c1", "type": "function", "function": {{"name": "run_python", "arguments": json.dumps({{"code": code}})}}}}
print(json.dumps({{"messages": [{{"role": "user", "content": req["task"]}},
                                {{"role": "assistant", "content": None, "tool_calls": [tool]}},
                                {{"role": "tool", "tool_call_id": "c1", "content": seen}},
                                {{"role": "assistant", "content": "done"}}]}}))
"""


def heavy_dataset(folder: Path, lookups: int = 300) -> Path:
    """One SpreadsheetBench task whose workbooks hold ``lookups`` VLOOKUPs over
    whole columns with no cached values: grading must recalculate them, which
    takes minutes (the shape of task 57072)."""
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    data = book.active
    data.title = "Data"
    for row in range(1, 2001):
        data.cell(row, 1, f"k{row}")
        data.cell(row, 2, row * 3)
    out = book.create_sheet("Out")
    for row in range(1, lookups + 1):
        out.cell(row, 1, f"k{row * 5}")
        out.cell(row, 3, f"=VLOOKUP(A{row},Data!A:B,2,FALSE)")
    cases = folder / "spreadsheet" / "heavy"
    cases.mkdir(parents=True)
    book.save(cases / "1_heavy_input.xlsx")
    book.save(cases / "1_heavy_answer.xlsx")
    (folder / "dataset.json").write_text(json.dumps([{
        "id": "heavy", "instruction": "Fill the lookups.", "instruction_type": "Cell-Level Manipulation",
        "answer_position": f"'Out'!C1:C{lookups}", "spreadsheet_path": "spreadsheet/heavy"}]))
    return folder


def sheet_kb(make_repo: MakeRepo, tmp_path: Path, grade_timeout: float) -> Path:
    data = heavy_dataset(tmp_path / "data")
    agent = tmp_path / "sheet_agent.py"
    agent.write_text(SHEET_AGENT.format(ready=str(tmp_path / "ready")))
    return make_repo({"brewkb.toml": (
        f'[env]\nname = "spreadsheetbench"\ndata = "{data}"\n'
        f'options = {{ train = 1.0, eval = 0.0, sandbox = "none", grade_timeout = {grade_timeout} }}\n'
        f'[agent]\nname = "command"\ncommand = ["{sys.executable}", "{agent}"]\ntimeout = 120\n'),
        "recipes/.gitkeep": ""})


def leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("brewkb-sheet-", "brewkb-grade-")))


def test_a_workbook_that_recalculates_for_minutes_fails_its_case_not_the_run(make_repo: MakeRepo,
                                                                              tmp_path: Path) -> None:
    root = sheet_kb(make_repo, tmp_path, grade_timeout=3)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    try:
        out = subprocess.run([sys.executable, "-m", "brewkb", "rollout", "--run", "s", "--split", "train"],
                             cwd=root, capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tmp)},
                             timeout=240)
    finally:
        _kill(survivors("brewkb.envs.sheetgrade"))
    assert out.returncode == 0, out.stderr
    [trajectory] = [json.loads(line) for line in (root / "runs" / "s" / "rollouts.jsonl").read_text().splitlines()]
    [case] = trajectory["outcome"]["detail"]["cases"]
    assert not trajectory["outcome"]["success"] and not case["passed"]
    assert "grading stopped: timed out after 3 s" in case["reason"] and "grade_timeout" in case["reason"]
    assert leftovers(tmp) == []  # the tool call's and the grading's folders went with them


def test_sigterm_ends_a_command_that_is_grading_a_workbook(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = sheet_kb(make_repo, tmp_path, grade_timeout=3600)
    proc = subprocess.Popen([sys.executable, "-m", "brewkb", "rollout", "--run", "t", "--split", "train"],
                            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("ready.*")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert list(tmp_path.glob("ready.*")), "the agent never made its tool call"
        time.sleep(2)  # the episode is over: its grading recalculates now
        proc.terminate()
        code = proc.wait(timeout=60)  # minutes of recalculation would be left without the child process
    finally:
        proc.kill()
        _kill(survivors("brewkb.envs.sheetgrade"))
    assert code == 130 and "brewkb: interrupted" in (proc.stderr.read() if proc.stderr else "")
    assert survivors("brewkb.envs.sheetgrade") == []


def test_a_workbook_that_needs_more_memory_than_allowed_fails_its_case(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = sheet_kb(make_repo, tmp_path, grade_timeout=600)
    toml = root / "brewkb.toml"
    toml.write_text(toml.read_text().replace("grade_timeout = 600", "grade_timeout = 600, grade_memory_mb = 200"))
    out = subprocess.run([sys.executable, "-m", "brewkb", "rollout", "--run", "m", "--split", "train"],
                         cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    [trajectory] = [json.loads(line) for line in (root / "runs" / "m" / "rollouts.jsonl").read_text().splitlines()]
    [case] = trajectory["outcome"]["detail"]["cases"]
    assert case["reason"] == "grading stopped: it needed more than env.options.grade_memory_mb (200 MB)"


def test_episodes_that_start_together_warn_of_a_missing_namespace_once() -> None:
    from brewkb.isolation import subproc

    class Slow(logging.Handler):  # a slow log (a terminal, a file on a busy disk) widens the window
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.said: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            time.sleep(0.05)
            self.said.append(record.getMessage())

    start = threading.Barrier(8)
    problem = f"bwrap: refused {time.monotonic_ns()}"  # a problem no other test has warned of
    logger, handler = logging.getLogger(subproc.__name__), Slow()
    logger.addHandler(handler)

    def first_episode() -> None:
        start.wait()
        subproc._warn_once(problem)

    try:
        threads = [threading.Thread(target=first_episode) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        logger.removeHandler(handler)
    assert sum(problem in said for said in handler.said) == 1

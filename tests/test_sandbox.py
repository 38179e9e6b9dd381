"""Agent code run by ``run_python`` on the real SpreadsheetBench sample: each test
attacks the sandbox one way, and the same code also writes the known answers,
which must still be graded as correct."""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("openpyxl")

from brewkb.envs.base import Task  # noqa: E402
from brewkb.envs.spreadsheetbench import SpreadsheetBench  # noqa: E402
from brewkb.errors import ConfigError  # noqa: E402
from brewkb.isolation.sandbox import Limits  # noqa: E402
from tests.sheets import SAMPLE, answer_code, needs_bwrap, processes_with, submitted  # noqa: E402

TASK_ID = "79-7"  # small workbooks, three test cases
pytestmark = needs_bwrap


@pytest.fixture(scope="module")
def env() -> SpreadsheetBench:
    return SpreadsheetBench(SAMPLE, fractions=(0.0, 0.0), limits=Limits(timeout=30, processes=32))


def graded(env: SpreadsheetBench, attack: str) -> tuple[dict[str, object], str]:
    """The outcome of ``attack`` followed by the answer writer, and what the tool
    returned when the agent ran it once."""
    task = Task(TASK_ID, "solve", "test")
    code = attack + "\n" + answer_code(env.sheet_tasks[TASK_ID])
    observation = env.session(task).call("run_python", {"code": code})
    outcome = env.grade(task, submitted(TASK_ID, code))
    assert outcome.success and outcome.detail["soft"] == 1.0, outcome.detail  # the legitimate output counts
    return dict(outcome.detail), observation


def test_code_cannot_read_other_processes_environments(env: SpreadsheetBench,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-brewkb-secret-0042")
    attack = """
import os
seen, leaked = [], False
for pid in [p for p in os.listdir('/proc') if p.isdigit()] + [str(os.getppid())]:
    seen.append(int(pid))
    try:
        leaked = leaked or b'sk-brewkb-secret' in open(f'/proc/{pid}/environ', 'rb').read()
    except OSError:
        pass
print('pids', sorted(set(seen)), 'leaked', leaked, 'env', sorted(os.environ))
"""
    _, observation = graded(env, attack)
    assert "leaked False" in observation and "sk-brewkb-secret" not in observation
    assert "pids [1, 2]" in observation  # its own namespace: bwrap's init and itself
    names = json.loads(observation.split("env ")[1].split("\n")[0].replace("'", '"'))
    assert {"INPUT_PATH", "OUTPUT_PATH"} <= set(names) <= {"INPUT_PATH", "OUTPUT_PATH", "PWD", "LC_CTYPE"}


def test_code_cannot_write_outside_its_folder(env: SpreadsheetBench, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    inputs = [c.input for c in env.sheet_tasks[TASK_ID].cases]
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs}
    targets = [str(victim), *map(str, inputs), f"{sys.prefix}/pwned.txt", "/usr/pwned.txt"]
    attack = f"""
import glob, os
wrote = []
found = [p for top in os.listdir('/') if top not in ('proc', 'dev', 'usr')
         for depth in range(7) for p in glob.glob(f'/{{top}}/' + '*/' * depth + '*input.xlsx')]
print('found', found)
for path in {targets!r} + [p for p in found if not p.startswith('/job/')]:
    try:
        open(path, 'wb').write(b'pwned')
        wrote.append(path)
    except OSError:
        pass
print('wrote', wrote)
"""
    _, observation = graded(env, attack)
    assert victim.read_text() == "untouched"
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs} == before
    assert not Path(sys.prefix, "pwned.txt").exists() and not Path("/usr/pwned.txt").exists()
    assert "wrote []" in observation and "found ['/job/input.xlsx']" in observation


def test_output_that_links_to_the_answer_is_not_read(env: SpreadsheetBench) -> None:
    answer = env.sheet_tasks[TASK_ID].cases[0].answer
    task = Task(TASK_ID, "solve", "test")
    outcome = env.grade(task, submitted(TASK_ID, f"import os\nos.symlink({str(answer)!r}, os.environ['OUTPUT_PATH'])"))
    assert outcome.detail["soft"] == 0.0 and outcome.detail["cases"][0]["reason"] == "no output workbook was written"


def test_code_cannot_open_a_network_connection(env: SpreadsheetBench) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.setblocking(False)
    port = server.getsockname()[1]
    attack = f"""
import socket
results = []
for host in ('127.0.0.1', '1.1.1.1'):
    try:
        socket.create_connection((host, {port} if host == '127.0.0.1' else 53), timeout=2).close()
        results.append('connected')
    except OSError as exc:
        results.append(type(exc).__name__)
print('network', results)
"""
    _, observation = graded(env, attack)
    assert "connected" not in observation and "network [" in observation
    with pytest.raises(BlockingIOError):
        server.accept()  # nobody knocked
    server.close()


def test_code_cannot_fork_without_limit(env: SpreadsheetBench) -> None:
    attack = """
import os, time
children = 0
try:
    for _ in range(1000):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children += 1
except OSError as exc:
    print('fork refused after', children, exc.errno)
"""
    _, observation = graded(env, attack)
    refused_after = int(observation.split("fork refused after ")[1].split()[0])
    assert refused_after < 32  # Limits(processes=32) counts the code's own process too


def test_code_leaves_no_detached_process_behind(env: SpreadsheetBench) -> None:
    token = f"brewkb-detached-{uuid.uuid4().hex}"
    attack = f"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, '-c', 'import time, sys; open("started", "w"); time.sleep(300)',
                                  {token!r}])
    os._exit(0)
while not os.path.exists('started'):
    time.sleep(0.05)
print('detached child started')
"""
    _, observation = graded(env, attack)
    assert "detached child started" in observation
    assert processes_with(token) == []


def test_missing_bubblewrap_is_refused_with_the_install_command(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"apt-get install -y bubblewrap .*sandbox = \"none\""):
        SpreadsheetBench(SAMPLE)
    weak = SpreadsheetBench(SAMPLE, fractions=(0.0, 0.0), sandbox="none")
    outcome = weak.grade(Task(TASK_ID, "solve", "test"), submitted(TASK_ID, answer_code(weak.sheet_tasks[TASK_ID])))
    assert outcome.success and outcome.detail["sandbox"] == "none"
    assert weak.describe()["sandbox"] == "none"


def test_a_bubblewrap_that_cannot_sandbox_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with pytest.raises(ConfigError, match="cannot create a sandbox here \\(bwrap: No permissions to create new "
                                          "namespace\\); allow user namespaces"):
        SpreadsheetBench(SAMPLE)


def test_code_has_a_private_writable_tmp(env: SpreadsheetBench) -> None:
    marker = f"brewkb-sandbox-{uuid.uuid4().hex}"
    attack = f"""
import tempfile
open('/tmp/{marker}', 'w').write('x')
print('tmp', tempfile.gettempdir(), open('/tmp/{marker}').read())
"""
    _, observation = graded(env, attack)
    assert "tmp /tmp x" in observation  # writable, and the one tempfile uses
    assert not Path("/tmp", marker).exists()  # private: not the host's

"""SpreadsheetBench: load a dataset folder, grade by the benchmark's rules, and
let an agent solve tasks by writing Python.

Users download the dataset themselves (CC BY-SA 4.0). The grading rules are
re-implemented from the benchmark's description:

- both workbooks are read for cached values only; a missing or unreadable
  output fails the case, and so does a sheet the answer names but the output lacks;
- ``answer_position`` is split on commas, each part on ``!``; quotes around the
  sheet and the range are stripped; a part without ``!`` means the answer's
  first sheet; a range covers every cell in it;
- values are normalised on both sides (numbers and booleans → floats rounded to
  2 places; numeric strings → that number; datetimes → the Excel serial day;
  times → ``HH:MM``); ``None`` equals ``""``; otherwise types and values must match;
- a case passes when every cell matches; soft score = passed / cases, hard = all.

Formulas written without cached values (openpyxl writes none) are recalculated
first: with headless LibreOffice when ``soffice`` is installed, otherwise with
the ``formulas`` package; the outcome says which. Reading and recalculating
run in a child process with a time and memory limit (``brewkb.envs.sheetgrade``:
``grade_timeout`` and ``grade_memory_mb`` of ``env.options``); a case over
either fails with the reason.

The environment's one tool, ``run_python(code)``, runs the agent's code in the
bubblewrap sandbox of ``brewkb.isolation.sandbox`` on a private copy of the task's first
input workbook, with only ``INPUT_PATH`` and ``OUTPUT_PATH`` in its environment.
The grader runs the last submitted code on every test case in the same way and
copies the output out without following links; the dataset is never visible to
the code. A case graded once (the same output and answer) is not graded again.
Every temporary folder goes with its tool call or its grading.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brewkb.config import EnvConfig
from brewkb.envs.base import SPLITS, Task
from brewkb.errors import ConfigError
from brewkb.envs.sheetgrade import (
    GradeLimits,
    grade_case,
    grade_isolated,
    normalise,
    parse_positions,
    workbook_values,
)
from brewkb.isolation.sandbox import Limits, check_mode, run_python
from brewkb.trajectories.schema import Outcome, Trajectory, tool_calls

__all__ = ["SpreadsheetBench", "load_dataset", "parse_positions", "normalise", "grade_case", "workbook_values",
           "Case", "GradeLimits"]

TOOL = {"type": "function", "function": {
    "name": "run_python",
    "description": "Run Python code on a copy of the task's workbook. The input workbook's path is in the "
                   "environment variable INPUT_PATH; save the result to OUTPUT_PATH (openpyxl is available). "
                   "Returns stdout, stderr and errors. The last code you run is the solution that is graded "
                   "on every test case.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"],
                   "additionalProperties": False}}}



@dataclass(frozen=True)
class Case:
    input: Path
    answer: Path


@dataclass(frozen=True)
class SheetTask:
    id: str
    instruction: str
    instruction_type: str
    answer_position: str
    cases: tuple[Case, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------- dataset
def _cases(folder: Path, task_id: str) -> tuple[Case, ...]:
    found = []
    for n in range(1, 100):
        inp, ans = folder / f"{n}_{task_id}_input.xlsx", folder / f"{n}_{task_id}_answer.xlsx"
        if inp.is_file() and ans.is_file():
            found.append(Case(inp, ans))
    if not found and (folder / f"1_{task_id}_init.xlsx").is_file():
        found.append(Case(folder / f"1_{task_id}_init.xlsx", folder / f"1_{task_id}_golden.xlsx"))
    if not found and (folder / "initial.xlsx").is_file():
        found.append(Case(folder / "initial.xlsx", folder / "golden.xlsx"))
    return tuple(c for c in found if c.answer.is_file())


def load_dataset(root: Path) -> list[SheetTask]:
    """Tasks of a SpreadsheetBench folder (``dataset.json`` and ``spreadsheet/<id>/``)."""
    index = root / "dataset.json"
    if not index.is_file():
        raise ConfigError(f"env.data: {root} has no dataset.json; point it at the SpreadsheetBench folder")
    text = index.read_text(encoding="utf-8")
    try:
        records = json.loads(text)
    except json.JSONDecodeError:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]  # the JSONL variant
    tasks = []
    for record in records:
        task_id = str(record["id"])
        folder = root / str(record.get("spreadsheet_path") or f"spreadsheet/{task_id}")
        cases = _cases(folder, task_id)
        if not cases:
            continue  # a record without test cases cannot be graded
        extra = {k: v for k, v in record.items()
                 if k not in ("id", "instruction", "instruction_type", "answer_position", "spreadsheet_path")}
        tasks.append(SheetTask(task_id, str(record["instruction"]), str(record.get("instruction_type", "")),
                               str(record["answer_position"]), cases, extra))
    return tasks


# ----------------------------------------------------------------- grading
# --------------------------------------------------------------- execution
def run_code(code: str, source: Path, work: Path, *, sandbox: str, limits: Limits) -> tuple[str, Path]:
    """Run ``code`` in the sandbox on a private copy of ``source`` in ``work/job``;
    returns the observation text and where the output workbook was collected to
    (``work/output.xlsx``; the file is absent when the code wrote none)."""
    job = work / "job"
    if work.exists():
        shutil.rmtree(work)
    job.mkdir(parents=True)
    name = f"input{source.suffix}"
    shutil.copyfile(source, job / name)
    done = run_python(code, job, name, mode=sandbox, limits=limits)
    out = _collect(job / f"output{source.suffix}", work / f"output{source.suffix}")
    parts = [f"exit status: {done.returncode}" if done.problem is None else f"stopped: {done.problem}"]
    if done.stdout:
        parts.append("stdout:\n" + done.stdout.decode("utf-8", "replace")[-4000:])
    if done.stderr:
        parts.append("stderr:\n" + done.stderr.decode("utf-8", "replace")[-4000:])
    parts.append("OUTPUT_PATH written" if out.is_file() else "OUTPUT_PATH not written (or not a regular file)")
    return "\n".join(parts), out


def _collect(written: Path, dest: Path) -> Path:
    """Copy the code's output out of its folder; a symlink or anything but a
    regular file is not an output (it could point at the answer or a host file)."""
    try:
        fd = os.open(written, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return dest
    with os.fdopen(fd, "rb") as src:
        if stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            with dest.open("wb") as out:
                shutil.copyfileobj(src, out)
    return dest


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Session:
    def __init__(self, env: SpreadsheetBench, task: SheetTask) -> None:
        self.env, self.task = env, task

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        if name != "run_python" or not isinstance(arguments.get("code"), str):
            return "Error: the only tool is run_python(code: str)"
        # each call runs on a fresh copy, in a folder that goes with the call
        with tempfile.TemporaryDirectory(prefix="brewkb-sheet-") as tmp:
            observation, _ = run_code(arguments["code"], self.task.cases[0].input, Path(tmp) / "session",
                                      sandbox=self.env.sandbox, limits=self.env.limits)
        return observation


class SpreadsheetBench:
    """The benchmark as a brewkb environment (see the module docstring)."""

    name = "spreadsheetbench"

    def __init__(self, root: Path, *, seed: int = 0, fractions: tuple[float, float] = (0.5, 0.2),
                 limits: Limits = Limits(), sandbox: str = "bwrap", grading: GradeLimits = GradeLimits()) -> None:
        check_mode(sandbox)
        self.root = root
        self.sheet_tasks = {t.id: t for t in load_dataset(root)}
        self.limits, self.sandbox, self.grading = limits, sandbox, grading
        ids = sorted(self.sheet_tasks)
        random.Random(seed).shuffle(ids)
        n_train, n_eval = round(len(ids) * fractions[0]), round(len(ids) * fractions[1])
        self.split_of = {i: "train" for i in ids[:n_train]}
        self.split_of.update({i: "eval" for i in ids[n_train : n_train + n_eval]})
        self.split_of.update({i: "test" for i in ids[n_train + n_eval :]})

    @classmethod
    def from_config(cls, config: EnvConfig, root: Path) -> SpreadsheetBench:
        if not config.data:
            raise ConfigError("env.data: set it to the SpreadsheetBench folder (or pass --data DIR)")
        opts = config.options
        return cls((root / config.data).resolve(), seed=config.seed,
                   fractions=(float(opts.get("train", 0.5)), float(opts.get("eval", 0.2))),
                   limits=Limits(timeout=float(opts.get("timeout", 60.0)), memory_mb=int(opts.get("memory_mb", 2048)),
                                 processes=int(opts.get("processes", 64))),
                   sandbox=str(opts.get("sandbox", "bwrap")),
                   grading=GradeLimits(timeout=_positive(opts, "grade_timeout", 300.0),
                                       memory_mb=int(_positive(opts, "grade_memory_mb", 4096))))

    def describe(self) -> dict[str, Any]:
        """The seeded split, for the run's manifest."""
        return {"name": self.name, "data": str(self.root), "sandbox": self.sandbox,
                "splits": {s: sorted(i for i, sp in self.split_of.items() if sp == s) for s in SPLITS}}

    def tasks(self, split: str) -> list[Task]:
        out = []
        for task_id in sorted(i for i, s in self.split_of.items() if s == split):
            t = self.sheet_tasks[task_id]
            text = (f"{t.instruction}\n\nThe workbook is at INPUT_PATH; save the result to OUTPUT_PATH. "
                    f"Instruction type: {t.instruction_type}. The answer is read from: {t.answer_position}.")
            out.append(Task(task_id, text, split, {"cases": len(t.cases)}))
        return out

    def tools(self) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(TOOL))]

    def session(self, task: Task) -> _Session:
        return _Session(self, self.sheet_tasks[task.id])

    def grade(self, task: Task, trajectory: Trajectory) -> Outcome:
        sheet = self.sheet_tasks[task.id]
        codes = [(c.args() or {}).get("code") for c in tool_calls(trajectory.messages) if c.name == "run_python"]
        code = next((c for c in reversed(codes) if isinstance(c, str)), None)
        if code is None:
            return Outcome(False, 0.0, {"reason": "no run_python call: nothing to grade", "soft": 0.0, "hard": 0.0,
                                        "first_case": 0.0, "sandbox": self.sandbox})
        before = [_digest(c.input) for c in sheet.cases]
        results = []
        with tempfile.TemporaryDirectory(prefix="brewkb-grade-") as tmp:
            for n, case in enumerate(sheet.cases):
                work = Path(tmp) / f"case{n}"
                observation, output = run_code(code, case.input, work, sandbox=self.sandbox, limits=self.limits)
                ok, detail = grade_isolated(output, case.answer, sheet.answer_position, work / "recalc",
                                            self.grading)
                results.append({"case": n + 1, "passed": ok, **detail,
                                **({} if ok else {"run": observation[-500:]})})
        if [_digest(c.input) for c in sheet.cases] != before:  # guards the dataset itself
            raise RuntimeError(f"an input workbook of task {task.id} changed during grading")
        passed = sum(r["passed"] for r in results)
        soft = passed / len(results)
        methods = sorted({r.get("recalc", "cached") for r in results})
        return Outcome(passed == len(results), round(soft, 4), {
            "soft": round(soft, 4), "hard": float(passed == len(results)), "first_case": float(results[0]["passed"]),
            "cases": results, "recalc": methods, "sandbox": self.sandbox})

    def relabel_task(self, task: Task, actions: Sequence[tuple[str, Mapping[str, Any]]], text: str) -> Task | None:
        return None  # a free-form task has no answer workbook to grade against


def _positive(options: Mapping[str, Any], key: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"env.options.{key}: expected a number > 0, got {value!r}")
    return float(value)

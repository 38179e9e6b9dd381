"""The loader and grader on the 40 real SpreadsheetBench tasks of the shared sample."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openpyxl")

from brewkb.envs.base import Task  # noqa: E402
from brewkb.envs.spreadsheetbench import SpreadsheetBench, grade_case, load_dataset  # noqa: E402
from brewkb.isolation.sandbox import Limits  # noqa: E402
from tests.conftest import MakeRepo  # noqa: E402
from tests.sheets import COPY_INPUT, SAMPLE, answer_code, needs_bwrap, submitted  # noqa: E402

# cases where the unmodified input already matches the answer in the answer range
# (the benchmark's own property; a do-nothing agent passes them)
DO_NOTHING_PASSES = {"193-42": [True, True, False], "30468": [True, False, False],
                     "570-43": [True, True, True], "CF_4909": [True, True, True], "CF_8276": [True, True, True]}


# both instruction types, a formula-recalculated input, and the duplicated-input task
SANDBOXED = ("193-42", "208-20", "30468", "37228", "39180", "79-7", "CF_8276", "109-21")


@pytest.fixture(scope="module")
def env() -> SpreadsheetBench:
    return SpreadsheetBench(SAMPLE, fractions=(0.0, 0.0), limits=Limits(timeout=60))


def test_the_sample_loads_forty_tasks_of_three_cases() -> None:
    tasks = load_dataset(SAMPLE)
    assert len(tasks) == 40 and all(len(t.cases) == 3 for t in tasks)
    assert {t.instruction_type for t in tasks} == {"Cell-Level Manipulation", "Sheet-Level Manipulation"}


def test_every_answer_graded_against_itself_passes(tmp_path: Path) -> None:
    results = {(t.id, n): grade_case(c.answer, c.answer, t.answer_position, tmp_path / t.id / str(n))
               for t in load_dataset(SAMPLE) for n, c in enumerate(t.cases, start=1)}
    assert len(results) == 120
    assert {key: detail for key, (ok, detail) in results.items() if not ok} == {}


@needs_bwrap
def test_known_answers_written_in_the_sandbox_grade_full_marks(env: SpreadsheetBench) -> None:
    """Code that writes the known answers, run inside the sandbox, passes. One
    exception is the data's: cases 2 and 3 of task 193-42 have byte-identical inputs
    but different answers, so code that sees only the input passes one of the two."""
    outcomes = {task_id: env.grade(Task(task_id, "solve", "test"), submitted(task_id, answer_code(task)))
                for task_id, task in env.sheet_tasks.items() if task_id in SANDBOXED}
    failed = {k: [c["passed"] for c in o.detail["cases"]] for k, o in outcomes.items() if not o.success}
    assert failed == {"193-42": [True, False, True]}
    full = [o for k, o in outcomes.items() if k != "193-42"]
    assert len(full) == len(SANDBOXED) - 1
    assert all(o.detail["first_case"] == o.detail["soft"] == o.detail["hard"] == 1.0 for o in full)
    assert {o.detail["sandbox"] for o in outcomes.values()} == {"bwrap"}


@needs_bwrap
def test_do_nothing_passes_exactly_the_cases_whose_input_matches(env: SpreadsheetBench) -> None:
    for task_id, cases in DO_NOTHING_PASSES.items():
        outcome = env.grade(Task(task_id, "solve", "test"), submitted(task_id, COPY_INPUT))
        assert [c["passed"] for c in outcome.detail["cases"]] == cases, task_id
        assert outcome.detail["first_case"] == 1.0 and outcome.detail["soft"] == round(sum(cases) / 3, 4)
        assert outcome.detail["hard"] == float(all(cases))
    wrong = env.grade(Task("109-21", "solve", "test"), submitted("109-21", COPY_INPUT))
    assert wrong.detail["first_case"] == wrong.detail["soft"] == 0.0


@needs_bwrap
def test_grading_twice_does_not_recalculate_twice(env: SpreadsheetBench) -> None:
    task = Task("208-20", "solve", "test")  # its input has formulas without cached values in the answer range
    first = env.grade(task, submitted("208-20", COPY_INPUT))
    assert first.detail["recalc"] in (["formulas"], ["libreoffice"], ["formulas", "formulas (reused)"],
                                      ["libreoffice", "libreoffice (reused)"])
    again = env.grade(task, submitted("208-20", COPY_INPUT))
    assert all(method.endswith("(reused)") for method in again.detail["recalc"])
    assert again.detail["cases"] == [{**c, "recalc": c["recalc"].split()[0] + " (reused)"} for c in
                                     first.detail["cases"]]


@needs_bwrap
def test_do_nothing_baseline_through_the_cli(make_repo: MakeRepo) -> None:
    agent = Path(__file__).resolve().parents[1] / "examples" / "sheet_do_nothing_agent.py"
    kb = make_repo({"brewkb.toml": f'[agent]\nname = "command"\ncommand = ["{sys.executable}", "{agent}"]\n'
                                   "[env]\nseed = 2\noptions = { train = 0.875, eval = 0.0 }\n", "recipes/.keep": ""})
    out = subprocess.run([sys.executable, "-m", "brewkb", "eval", "--env", "spreadsheetbench", "--data", str(SAMPLE),
                          "--context", "none", "--json"], cwd=kb, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (column,) = json.loads(out.stdout)
    test_ids = [t.id for t in SpreadsheetBench(SAMPLE, seed=2, fractions=(0.875, 0.0)).tasks("test")]
    assert test_ids == ["17251", "193-42", "30468", "48799", "CF_4909"]
    cases = [DO_NOTHING_PASSES.get(i, [False] * 3) for i in test_ids]
    assert column["episodes"] == len(test_ids) == 5
    assert column["scores"] == {"first_case": round(sum(c[0] for c in cases) / 5, 4),
                                "soft": round(sum(sum(c) / 3 for c in cases) / 5, 4),
                                "hard": round(sum(all(c) for c in cases) / 5, 4)}

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

openpyxl = pytest.importorskip("openpyxl")  # the [spreadsheet] extra; the test extra includes it

from brewkb.agents.base import run_episode  # noqa: E402
from brewkb.agents.external import PythonAgent  # noqa: E402
from brewkb.envs.spreadsheetbench import (  # noqa: E402
    SpreadsheetBench,
    grade_case,
    load_dataset,
    normalise,
    parse_positions,
    workbook_values,
)
from brewkb.isolation.sandbox import Limits  # noqa: E402
from brewkb.trajectories.schema import KBUse  # noqa: E402
from tests.conftest import MakeRepo  # noqa: E402


def book(path: Path, sheets: dict[str, dict[str, Any]]) -> Path:
    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    for name, cells in sheets.items():
        ws = wb.create_sheet(name)
        for coord, value in cells.items():
            ws[coord] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    wb.save(path)
    return path


def check(tmp_path: Path, answer: dict[str, dict[str, Any]], output: dict[str, dict[str, Any]],
          position: str) -> tuple[bool, dict[str, Any]]:
    a = book(tmp_path / "answer.xlsx", answer)
    o = book(tmp_path / "output.xlsx", output)
    return grade_case(o, a, position, tmp_path / "work")


@pytest.mark.parametrize(
    ("want", "got", "ok"),
    [
        (True, 1, True),                         # bool vs 1
        (1.5, "1.50", True),                     # numeric strings are numbers
        (1.004, 1.0, True),                      # rounded to 2 places
        ("1.5 kg", "1.5 Kg", False),             # strings are exact
        ("abc", "abc ", False),
        (None, "", True),                        # None equals ""
        (dt.datetime(2024, 5, 1, 18, 0), dt.datetime(2024, 5, 1, 9, 0), False),  # rounded to the nearest day
        (dt.datetime(2024, 5, 1), dt.datetime(2024, 5, 1, 11, 0), True),
        (dt.datetime(2024, 5, 1), 45413, True),  # a date is its Excel serial day
        (dt.time(9, 30), dt.time(9, 30, 59), True),
        (dt.time(9, 30), "09:31", False),
    ],
)
def test_cell_rules(tmp_path: Path, want: Any, got: Any, ok: bool) -> None:
    assert check(tmp_path, {"S": {"A1": want}}, {"S": {"A1": got}}, "S!A1")[0] is ok


def test_normalise_values() -> None:
    assert normalise(True) == 1.0 and normalise("2.345") == 2.35 and normalise(dt.time(7, 5)) == "07:05"
    assert normalise(dt.datetime(1900, 1, 1)) == 2.0


def test_positions_with_quotes_and_several_sheets() -> None:
    assert parse_positions("'Sheet1!'A2:B19") == [("Sheet1", "A2:B19")]
    assert parse_positions("Updated Data'!B5:B9") == [("Updated Data", "B5:B9")]
    assert parse_positions("'S 1'!A1,B2:B3 , 'T'!$C$4") == [("S 1", "A1"), (None, "B2:B3"), ("T", "C4")]


def test_multi_sheet_ranges_missing_sheets_and_first_sheet_default(tmp_path: Path) -> None:
    answer = {"First": {"A1": 1, "A2": 2}, "Updated Data": {"B5": "x", "B6": "y"}}
    good = {"First": {"A1": 1, "A2": 2}, "Updated Data": {"B5": "x", "B6": "y"}}
    assert check(tmp_path, answer, good, "A1:A2,'Updated Data'!B5:B6")[0]
    wrong = {"First": {"A1": 1, "A2": 3}, "Updated Data": {"B5": "x", "B6": "y"}}
    ok, detail = check(tmp_path, answer, wrong, "A1:A2,'Updated Data'!B5:B6")
    assert not ok and detail["reason"].startswith("First!A2")
    ok, detail = check(tmp_path, answer, {"First": {"A1": 1, "A2": 2}}, "Updated Data'!B5:B6")
    assert not ok and "missing from the output" in detail["reason"]


def test_missing_or_broken_output_fails(tmp_path: Path) -> None:
    answer = book(tmp_path / "a.xlsx", {"S": {"A1": 1}})
    assert grade_case(tmp_path / "none.xlsx", answer, "A1", tmp_path)[1]["reason"] == "no output workbook was written"
    (tmp_path / "bad.xlsx").write_text("not a workbook")
    assert "unreadable" in grade_case(tmp_path / "bad.xlsx", answer, "A1", tmp_path)[1]["reason"]


def test_uncached_formula_passes_only_after_recalculation(tmp_path: Path) -> None:
    answer = book(tmp_path / "answer.xlsx", {"Data": {"A1": 2, "A2": 3, "A3": 6}})
    output = book(tmp_path / "output.xlsx", {"Data": {"A1": 2, "A2": 3, "A3": "=A1*A2"}})
    cached = openpyxl.load_workbook(output, data_only=True)["Data"]["A3"].value
    assert cached is None  # openpyxl wrote the formula without a value
    values, method = workbook_values(output, tmp_path / "work")
    assert values["Data"]["A3"] == 6 and method in ("formulas", "libreoffice")
    ok, detail = grade_case(output, answer, "Data!A3", tmp_path / "work2")
    assert ok and detail["recalc"] == f"{method} (reused)"  # the same cells are recalculated once


SOLUTIONS = {
    # task id → code that solves it
    "101": "import openpyxl, os\nwb = openpyxl.load_workbook(os.environ['INPUT_PATH'])\nws = wb.active\n"
           "ws['C1'] = ws['A1'].value + ws['B1'].value\nwb.save(os.environ['OUTPUT_PATH'])\n",
    "325-44": "import openpyxl, os\nwb = openpyxl.load_workbook(os.environ['INPUT_PATH'])\n"
              "wb['Out']['A1'] = '=SUM(Data!A1:A3)'\nwb.save(os.environ['OUTPUT_PATH'])\n",
    # 202: a wrong answer on purpose (only the first case is right)
    "202": "import openpyxl, os\nwb = openpyxl.load_workbook(os.environ['INPUT_PATH'])\n"
           "wb.active['B1'] = 'done'\nwb.save(os.environ['OUTPUT_PATH'])\n",
}


def dataset(root: Path) -> Path:
    """Three tasks in the published layout: numbered cases, the verified-400 names, bare names."""
    records = [
        {"id": 101, "instruction": "Put A1+B1 in C1.", "spreadsheet_path": "spreadsheet/101",
         "instruction_type": "Cell-Level Manipulation", "answer_position": "C1"},
        {"id": "202", "instruction": "Write 'done' in B1 when A1 is 'yes', else 'no'.",
         "spreadsheet_path": "spreadsheet/202", "instruction_type": "Cell-Level Manipulation",
         "answer_position": "'Sheet'!B1"},
        {"id": "325-44", "instruction": "Sum Data!A1:A3 into Out!A1.", "spreadsheet_path": "spreadsheet/325-44",
         "instruction_type": "Sheet-Level Manipulation", "answer_position": "'Out!'A1", "answer_sheet": "Out",
         "data_position": "'Data'!A1:A3'"},
    ]
    (root / "dataset.json").parent.mkdir(parents=True, exist_ok=True)
    (root / "dataset.json").write_text(json.dumps(records))
    s = root / "spreadsheet"
    for n, (a, b) in enumerate([(1, 2), (10, 5)], start=1):
        book(s / "101" / f"{n}_101_input.xlsx", {"Sheet": {"A1": a, "B1": b}})
        book(s / "101" / f"{n}_101_answer.xlsx", {"Sheet": {"A1": a, "B1": b, "C1": a + b}})
    for n, word in enumerate(["yes", "nope"], start=1):
        book(s / "202" / f"{n}_202_input.xlsx", {"Sheet": {"A1": word}})
        book(s / "202" / f"{n}_202_answer.xlsx", {"Sheet": {"A1": word, "B1": "done" if word == "yes" else "no"}})
    book(s / "325-44" / "1_325-44_init.xlsx", {"Data": {"A1": 1, "A2": 2, "A3": 4}, "Out": {}})
    book(s / "325-44" / "1_325-44_golden.xlsx", {"Data": {"A1": 1, "A2": 2, "A3": 4}, "Out": {"A1": 7}})
    return root


AGENT = '''
import json
SOLUTIONS = json.loads({solutions!r})


def run(request):
    task_id = next((t for t in SOLUTIONS if request["task"].startswith(INSTRUCTIONS[t])), None)
    messages = [{{"role": "user", "content": request["task"]}}]
    if task_id is not None:
        messages.append({{"role": "assistant", "content": None, "tool_calls": [{{"id": "c1", "type": "function",
            "function": {{"name": "run_python", "arguments": json.dumps({{"code": SOLUTIONS[task_id]}})}}}}]}})
        messages.append({{"role": "tool", "tool_call_id": "c1", "content": "exit status: 0"}})
    messages.append({{"role": "assistant", "content": "done"}})
    return {{"messages": messages}}


INSTRUCTIONS = {{"101": "Put A1+B1", "202": "Write 'done'", "325-44": "Sum Data"}}
'''


def write_agent(folder: Path) -> None:
    (folder / "sheet_agent.py").write_text(AGENT.format(solutions=json.dumps(SOLUTIONS)))


def test_dataset_loads_runs_and_grades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = dataset(tmp_path / "sb")
    tasks = {t.id: t for t in load_dataset(root)}
    assert {k: len(t.cases) for k, t in tasks.items()} == {"101": 2, "202": 2, "325-44": 1}
    env = SpreadsheetBench(root, fractions=(0.0, 0.0))
    assert sorted(t.id for t in env.tasks("test")) == ["101", "202", "325-44"]
    inputs = {p: p.read_bytes() for p in root.rglob("*_input.xlsx")}
    write_agent(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = PythonAgent("sheet_agent:run")
    outcomes = {t.id: run_episode(agent, t, "", env, KBUse()).outcome for t in env.tasks("test")}
    assert outcomes["101"].success and outcomes["101"].detail["hard"] == 1.0
    assert outcomes["325-44"].success  # a formula, recalculated before grading
    assert outcomes["325-44"].detail["recalc"][0].split()[0] in ("formulas", "libreoffice")
    assert not outcomes["202"].success and outcomes["202"].detail["soft"] == 0.5  # one of two cases
    assert outcomes["202"].detail["hard"] == 0.0
    assert {p: p.read_bytes() for p in inputs} == inputs  # inputs never modified


def test_the_tool_runs_code_with_limits(tmp_path: Path) -> None:
    env = SpreadsheetBench(dataset(tmp_path / "sb"), limits=Limits(timeout=5))
    session = env.session(env.tasks("test")[0] if env.tasks("test") else env.tasks("train")[0])
    out = session.call("run_python", {"code": "print('hi'); raise ValueError('boom')"})
    assert "stdout:\nhi" in out and "ValueError: boom" in out and "OUTPUT_PATH not written" in out
    slow = session.call("run_python", {"code": "import time; time.sleep(30)"})
    assert "timed out" in slow
    hog = session.call("run_python", {"code": "x = bytearray(8 * 1024 ** 3)"})
    assert "MemoryError" in hog
    assert session.call("other", {}).startswith("Error")


def eval_column(tmp_path: Path, make_repo: MakeRepo, solutions: dict[str, str]) -> dict[str, Any]:
    """``brewkb eval --json`` on the small dataset with an agent that knows ``solutions``."""
    data = dataset(tmp_path / "sb")
    (tmp_path / "sheet_agent.py").write_text(AGENT.format(solutions=json.dumps(solutions)))
    kb = make_repo({"brewkb.toml": '[agent]\nname = "python"\nentry = "sheet_agent:run"\n'
                                   '[env]\noptions = { train = 0.0, eval = 0.0 }\n', "recipes/.gitkeep": ""})
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[1]}"}
    out = subprocess.run([sys.executable, "-m", "brewkb", "eval", "--env", "spreadsheetbench", "--data", str(data),
                          "--context", "none", "--json"], cwd=kb, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    (column,) = json.loads(out.stdout)
    return column


def test_eval_end_to_end_on_the_cli(tmp_path: Path, make_repo: MakeRepo) -> None:
    column = eval_column(tmp_path, make_repo, SOLUTIONS)
    assert column["episodes"] == 3 and column["success_rate"] == pytest.approx(2 / 3, abs=1e-3)
    assert column["scores"] == {"first_case": 1.0, "soft": 0.8333, "hard": 0.6667}  # 202 passes its first case


def test_missing_dataset_is_explained(tmp_path: Path) -> None:
    from brewkb.errors import ConfigError

    with pytest.raises(ConfigError, match="has no dataset.json"):
        load_dataset(tmp_path)


def test_an_episode_without_code_counts_zero_in_every_score(tmp_path: Path, make_repo: MakeRepo) -> None:
    # no run_python call on 325-44
    column = eval_column(tmp_path, make_repo, {k: v for k, v in SOLUTIONS.items() if k != "325-44"})
    assert column["success_rate"] == pytest.approx(1 / 3, abs=1e-3)
    assert column["scores"] == {"first_case": 0.6667, "soft": 0.5, "hard": 0.3333}

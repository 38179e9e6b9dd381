"""SpreadsheetBench's grading rules (see ``brewkb.envs.spreadsheetbench``),
and grading a case in a child process with a time and memory limit.

A workbook the agent wrote, or one whose formulas lack cached values, can
take any time and memory to read or recalculate (hundreds of lookups over
whole columns take tens of minutes and gigabytes). So ``grade_isolated``
reads and recalculates in a child process, contained like an agent program
(``brewkb.isolation.subproc``), under a memory limit: a case that
passes either limit fails, with the reason, and the run goes on; an
interrupted command ends the child at once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brewkb.errors import ConfigError
from brewkb.isolation.subproc import run_capped

__all__ = ["GradeLimits", "grade_isolated", "grade_case", "parse_positions", "expand", "normalise", "same",
           "workbook_values", "EXCEL_EPOCH"]

EXCEL_EPOCH = dt.datetime(1899, 12, 30)


def _openpyxl() -> Any:
    try:
        import openpyxl
    except ImportError:
        raise ConfigError("SpreadsheetBench needs openpyxl: pip install openpyxl formulas (in brewkb's checkout: "
                          "pip install '.[spreadsheet]')") from None
    return openpyxl


def parse_positions(position: str) -> list[tuple[str | None, str]]:
    """``"'Sheet1'!A1:B2,C3"`` → ``[("Sheet1", "A1:B2"), (None, "C3")]``."""
    parts: list[tuple[str | None, str]] = []
    for part in position.split(","):
        part = part.strip()
        if not part:
            continue
        if "!" in part:
            sheet, _, cells = part.partition("!")
            parts.append((sheet.strip().strip("'"), cells.strip().strip("'").replace("$", "")))
        else:
            parts.append((None, part.strip("'").replace("$", "")))
    return parts


def expand(cells: str) -> list[str]:
    from openpyxl.utils import get_column_letter, range_boundaries

    if ":" not in cells:
        return [cells.upper()]
    min_col, min_row, max_col, max_row = range_boundaries(cells.upper())
    return [f"{get_column_letter(c)}{r}" for r in range(min_row, max_row + 1) for c in range(min_col, max_col + 1)]


def normalise(value: Any) -> Any:
    if isinstance(value, bool | int | float):
        return round(float(value), 2)
    if isinstance(value, dt.datetime):
        return float(round((value - EXCEL_EPOCH).total_seconds() / 86400, 0))
    if isinstance(value, dt.date):
        return float((value - EXCEL_EPOCH.date()).days)
    if isinstance(value, dt.time):
        return value.strftime("%H:%M")
    if isinstance(value, str):
        try:
            return round(float(value), 2)
        except ValueError:
            return value
    return value


def same(a: Any, b: Any) -> bool:
    a, b = normalise(a), normalise(b)
    if (a is None and b == "") or (a == "" and b is None):
        return True
    return type(a) is type(b) and a == b


Values = dict[str, dict[str, Any]]


def _read(path: Path) -> tuple[Values, set[tuple[str, str]], str]:
    """Cached values of every sheet, the cells whose formula lacks its value, and a
    digest of the workbook's cell contents (formulas included, file metadata not)."""
    openpyxl = _openpyxl()
    with warnings.catch_warnings():  # openpyxl warns about extensions it drops; they hold no cell values
        warnings.simplefilter("ignore", UserWarning)
        values = openpyxl.load_workbook(path, data_only=True)
        formulas = openpyxl.load_workbook(path, data_only=False)
    out: Values = {}
    missing: set[tuple[str, str]] = set()
    digest = hashlib.sha256()
    for ws in values.worksheets:
        cells = out.setdefault(ws.title, {})
        raw_sheet = formulas[ws.title]
        digest.update(repr(ws.title).encode())
        for row in ws.iter_rows():
            for cell in row:
                cells[cell.coordinate] = cell.value
                raw = raw_sheet[cell.coordinate].value
                digest.update(repr((cell.coordinate, raw, cell.value)).encode())
                if cell.value is None and isinstance(raw, str) and raw.startswith("="):
                    missing.add((ws.title, cell.coordinate))
    return out, missing, digest.hexdigest()


class _Memo:
    """A bounded, thread-safe memo: a workbook read or recalculated once (an
    answer graded for every episode, a solution graded twice) is not read or
    recalculated again."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self.entries: dict[str, Any] = {}
        self.lock = threading.Lock()

    def get(self, key: str) -> Any:
        with self.lock:
            return self.entries.get(key)

    def put(self, key: str, entry: Any) -> None:
        with self.lock:
            if len(self.entries) >= self.size:
                self.entries.pop(next(iter(self.entries)))
            self.entries[key] = entry


RECALCULATED = _Memo()  # by cell contents
READ = _Memo()  # by file bytes


def _libreoffice(path: Path, work: Path) -> Path | None:
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        return None
    out = work / "recalculated"
    out.mkdir(exist_ok=True)
    subprocess.run([soffice, "--headless", "--calc", "--convert-to", "xlsx", "--outdir", str(out), str(path)],
                   capture_output=True, timeout=180, check=False)
    result = out / path.name
    return result if result.is_file() else None


def _formulas(path: Path, work: Path) -> Values | None:
    os.environ.setdefault("TQDM_DISABLE", "1")  # formulas draws progress bars on stderr for every workbook
    try:
        import formulas
    except ImportError:
        return None
    out = work / "formulas"
    # links to other workbooks and unsupported extensions are the workbook's own: not the user's to act on
    logging.getLogger("formulas").setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = formulas.ExcelModel().loads(str(path)).finish()
        model.calculate()
        model.write(dirpath=str(out))
    written = next(out.glob("*"), None)
    if written is None:
        return None
    return _read(written)[0]


def workbook_values(path: Path, work: Path,
                    positions: Sequence[tuple[str | None, str]] | None = None) -> tuple[Values, str]:
    """Cell values of a workbook, recalculated when a formula lacks its cached value
    (only a formula inside ``positions`` counts when they are given; a ``None``
    sheet is the workbook's first); returns the values (do not modify them: they
    may be shared) and how (``cached``, ``libreoffice``, ``formulas`` or
    ``uncalculated``; `` (reused)`` is appended when an earlier recalculation of
    the same cells is reused)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    read = READ.get(digest)
    if read is None:
        read = _read(path)
        READ.put(digest, read)
    values, missing, key = read
    if positions is not None:
        first = next(iter(values), None)
        wanted = {(sheet or first, coord) for sheet, cells in positions for coord in expand(cells)}
        missing = missing & wanted
    if not missing:
        return values, "cached"
    known = RECALCULATED.get(key)
    if known is not None:
        return known[0], f"{known[1]} (reused)"
    values, method = _recalculate(path, work, values)
    RECALCULATED.put(key, (values, method))
    return values, method


def _recalculate(path: Path, work: Path, values: Values) -> tuple[Values, str]:
    converted = _libreoffice(path, work)
    if converted is not None:
        return _read(converted)[0], "libreoffice"
    computed = _formulas(path, work)
    if computed is None:
        return values, "uncalculated"
    by_upper = {name.upper(): cells for name, cells in computed.items()}
    values = {sheet: dict(cells) for sheet, cells in values.items()}  # the read values are shared
    for sheet, cells in values.items():  # formulas upper-cases sheet names; keep the originals
        for coord, value in by_upper.get(sheet.upper(), {}).items():
            if cells.get(coord) is None:
                cells[coord] = value
    return values, "formulas"


def grade_case(output: Path, answer: Path, position: str, work: Path) -> tuple[bool, dict[str, Any]]:
    """Whether ``output`` matches ``answer`` at ``position``, with the reason."""
    if not output.is_file():
        return False, {"reason": "no output workbook was written"}
    try:
        positions = parse_positions(position)
        expected, _ = workbook_values(answer, work / "answer", positions)
        first = next(iter(expected), None)
        resolved = [(sheet or first, cells) for sheet, cells in positions]
        got, method = workbook_values(output, work, resolved)
    except Exception as exc:  # openpyxl raises many types for a damaged file
        return False, {"reason": f"unreadable workbook: {type(exc).__name__}: {exc}"}
    for sheet, cells in resolved:
        name = sheet or first
        if name not in got:
            return False, {"reason": f"sheet {name!r} is missing from the output", "recalc": method}
        for coord in expand(cells):
            want, have = expected.get(name, {}).get(coord), got[name].get(coord)
            if not same(want, have):
                return False, {"reason": f"{name}!{coord}: expected {want!r}, got {have!r}", "recalc": method}
    return True, {"recalc": method}


@dataclass(frozen=True)
class GradeLimits:
    """What grading one case may take: wall-clock seconds, and memory (the
    data segment: heap and private mappings, ``RLIMIT_DATA``)."""

    timeout: float = 300.0
    memory_mb: int = 4096


GRADED = _Memo()  # by the bytes of the output and the answer, and the position


# Sets the memory limit before anything large is imported, grades one case and prints the result.
CHILD = ("import json, resource, sys\n"
         "memory = int(sys.argv[5]) * 1024 * 1024\n"
         "resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))\n"
         "from brewkb.envs.sheetgrade import grade_case\n"
         "from pathlib import Path\n"
         "ok, detail = grade_case(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))\n"
         "said = str(detail.get('reason', ''))\n"
         "starved = said.startswith('unreadable workbook:') and any(\n"
         "    sign in said for sign in ('MemoryError', 'SystemError', 'failed to map', 'Cannot allocate memory'))\n"
         "print(json.dumps({'ok': ok, 'detail': detail, 'memory': starved}, default=str))\n")
"""A workbook unreadable only because the limit cut an allocation short says so
(C extensions report it as ``MemoryError``, ``SystemError`` or a failed mapping)."""


def grade_isolated(output: Path, answer: Path, position: str, work: Path,
                   limits: GradeLimits) -> tuple[bool, dict[str, Any]]:
    """``grade_case`` in a child process under ``limits``; a case that passes
    them fails, with the reason. A case graded before (the same output and
    answer bytes) is not graded again."""
    if not output.is_file():
        return False, {"reason": "no output workbook was written"}
    key = hashlib.sha256(b"\0".join([output.read_bytes(), answer.read_bytes(), position.encode()])).hexdigest()
    known = GRADED.get(key)
    if known is not None:
        ok, detail = known
        method = detail.get("recalc")
        return ok, {**detail, **({"recalc": f"{method} (reused)"} if method and method != "cached" else {})}
    argv = [sys.executable, "-c", CHILD, str(output), str(answer), position, str(work), str(limits.memory_mb)]
    # one BLAS thread: each would reserve memory of its own, which the limit counts
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    done = run_capped(argv, b"", timeout=limits.timeout, max_output=50_000_000, env=env)
    result = _parse(done.stdout)
    starved = result is not None and bool(result[1].pop("memory", False))
    if done.problem is not None or result is None or starved:
        said = done.stderr.decode("utf-8", "replace")
        if done.problem is not None:
            reason = f"grading stopped: {done.problem} (env.options.grade_timeout is {limits.timeout:g} s)"
        elif starved or "MemoryError" in said:
            reason = f"grading stopped: it needed more than env.options.grade_memory_mb ({limits.memory_mb} MB)"
        else:
            last = [line for line in said.splitlines() if line.strip()]
            reason = f"grading failed (exit status {done.returncode}): {last[-1][:300] if last else 'no output'}"
        return False, {"reason": reason}
    assert result is not None
    GRADED.put(key, result)
    return result


def _parse(stdout: bytes) -> tuple[bool, dict[str, Any]] | None:
    for line in reversed(stdout.decode("utf-8", "replace").splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and isinstance(data.get("detail"), dict):
            return bool(data.get("ok")), {**data["detail"], "memory": bool(data.get("memory"))}
    return None

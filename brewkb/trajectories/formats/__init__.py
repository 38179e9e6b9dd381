"""The formats ``brewkb import`` reads, one module each, and their registry.

    openai          JSONL of {messages, success | reward?, task?, task_id?, id?}
    tau-bench       JSON array of {task_id, trial, reward, traj, info{task{instruction}}}
    tau2            tau2-bench results: {tasks?, simulations[]} or a bare list of simulations
    osworld         a results folder: <domain>/<example_id>/traj.jsonl and result.txt
    otel            OpenTelemetry GenAI spans (and events) in OTLP JSON
    openinference   OpenInference LLM spans in OTLP JSON
    serve           what `brewkb serve` recorded: a serve run's folder

A reader yields ``Trajectory`` values or ``Skipped`` items (a record it could
not read, with where it is and why); it writes nothing, reads one record at a
time, and never fails on a record's content. ``sniff`` names the format a
file looks like, so a wrong ``--format`` gets a useful error.

This subpackage belongs to the trajectories subsystem: it may import config,
errors, fsutil and the rest of ``brewkb.trajectories``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from brewkb.errors import TrajectoryError
from brewkb.trajectories.formats import openai, openinference, osworld, otel, serve, tau2, tau_bench
from brewkb.trajectories.formats.base import Item, Reader, Skipped

__all__ = ["Format", "FORMATS", "Skipped", "Item", "import_file", "sniff"]


@dataclass(frozen=True)
class Format:
    name: str
    read: Reader
    looks_like: Callable[[str], bool] | None
    """Whether a file's first 200,000 characters look like this format (``None``: a folder format)."""
    folder: bool = False


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("openai", openai.read, openai.looks_like),
    Format("tau-bench", tau_bench.read, tau_bench.looks_like),
    Format("tau2", tau2.read, tau2.looks_like),
    Format("osworld", osworld.read, None, folder=True),
    Format("otel", otel.read, otel.looks_like),
    Format("openinference", openinference.read, openinference.looks_like),
    Format("serve", serve.read, None, folder=True),
)}

_SNIFF_ORDER = ("tau-bench", "tau2", "openinference", "otel", "openai")
JSON_STARTS = frozenset(bytes([c]) for c in b'{["-0123456789tfn')
"""The bytes a JSON text (or a JSON line) can start with."""


def sniff(path: Path) -> str | None:
    """The format ``path`` looks like, or ``None``. A trace holding both
    OpenInference and GenAI spans is left to ``--format``."""
    if path.is_dir():
        return "osworld" if osworld.looks_like(path) else "serve" if serve.looks_like(path) else None
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as handle:
            head = handle.read(200_000)
    except OSError:
        return None
    found = [name for name in _SNIFF_ORDER if (test := FORMATS[name].looks_like) is not None and test(head)]
    if {"otel", "openinference"} <= set(found):
        return None
    return found[0] if found else None


def _looks_like(path: Path) -> str:
    guess = sniff(path)
    return f"it looks like `{guess}`: try --format {guess}" if guess else "its format is not one brewkb reads"


def import_file(path: Path, fmt: str, split: str = "train", tasks: Path | None = None) -> Iterator[Item]:
    """The items of ``path`` read as ``fmt``; a file that looks like another
    format is refused before anything is read."""
    if fmt not in FORMATS:
        raise TrajectoryError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not path.exists():
        raise TrajectoryError(f"{path}: no such file or folder")
    spec = FORMATS[fmt]
    if path.is_dir() and not spec.folder:
        files = sorted(p.name for p in path.iterdir() if p.suffix in (".json", ".jsonl"))[:3]
        hint = f"pass one of its files ({', '.join(files)})" if files else _looks_like(path)
        raise TrajectoryError(f"{path} is a folder and `{fmt}` reads a file; {hint}")
    if spec.folder and not path.is_dir():
        raise TrajectoryError(f"{path}: `{fmt}` reads a folder; {_looks_like(path)}")
    start = b"" if path.is_dir() else _start(path)
    if not path.is_dir() and not start:
        raise TrajectoryError(f"{path} is empty: nothing to import")
    if start and start[:1] not in JSON_STARTS:
        shown = start.decode("utf-8", "replace").splitlines()[0][:40]
        raise TrajectoryError(f"{path} is not JSON (it starts with {shown!r}); `{fmt}` reads "
                              f"{'JSON lines' if fmt == 'openai' else 'a JSON file'}: check the file")
    if fmt == "openai" and start[:1] == b"[":
        raise TrajectoryError(f"{path}: `openai` reads JSON lines, one conversation object per line "
                              f"({{\"messages\": [...]}}); {_arrays_hint(path)}")
    guess = sniff(path)
    if guess is not None and guess != fmt:
        raise TrajectoryError(f"{path} does not look like `{fmt}`: it looks like `{guess}`; use --format {guess}")
    return spec.read(path, split, tasks)


def _arrays_hint(path: Path) -> str:
    """How to turn a file that starts with an array into JSON lines: each line a list of messages, or one array of
    conversations."""
    with path.open("rb") as file:
        first = file.readline(1 << 20)
    try:
        line = json.loads(first)
    except (ValueError, RecursionError):
        line = None
    if isinstance(line, list) and line and all(isinstance(m, dict) and "role" in m for m in line):
        return "each line of this file is a list of messages: `jq -c '{messages: .}' FILE > FILE.jsonl` wraps them"
    return "this file is one JSON array: `jq -c '.[]' FILE > FILE.jsonl` writes one conversation per line"


def _start(path: Path) -> bytes:
    """The file's first bytes after white space and a byte-order mark (empty
    when it holds nothing else; read until it does)."""
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 16):
            if chunk := chunk.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip():
                return chunk[:200]
    return b""

"""What every bench shares: repeated figures as median and spread, targets,
and the last line of output (one JSON object) that ``--check`` turns into an
exit code.

A bench measures its reference in the same process and run as brewkb,
repeats its timings (``--repeats``, at least 3 with ``--check``), prints what
it found for a reader, then, as its last line, ``{"bench": ..., "figures":
..., "targets": {...}}``. With ``--check`` it exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any, TextIO

MIN_REPEATS = 3


def add_check(parser: argparse.ArgumentParser, repeats: int | None = MIN_REPEATS) -> None:
    """``--check``, and ``--repeats`` unless ``repeats`` is ``None`` (a bench
    whose figures are not timings: its seeds are its repetitions)."""
    if repeats is not None:
        parser.add_argument("--repeats", type=int, default=repeats, help=f"repetitions (default {repeats})")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed"
                        + (f" (needs --repeats of at least {MIN_REPEATS})" if repeats is not None else ""))


def checked_repeats(args: argparse.Namespace) -> int:
    if args.check and args.repeats < MIN_REPEATS:
        sys.exit(f"{sys.argv[0]}: --check needs --repeats {MIN_REPEATS} or more (got {args.repeats})")
    return int(args.repeats)


def spread(values: Sequence[float], digits: int = 4) -> dict[str, Any]:
    """Median, min and max of repeated measurements, and how many."""
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "n": len(values)}


def target(value: float, limit: float, *, at_most: bool = True, what: str = "") -> dict[str, Any]:
    """A target on a figure: ``value`` at most (or at least) ``limit``."""
    met = value <= limit if at_most else value >= limit
    return {"value": round(value, 4), "limit": limit, "at_most": at_most, "met": bool(met), "what": what}


def finish(bench: str, figures: dict[str, Any], targets: dict[str, dict[str, Any]], check: bool,
           lines: TextIO | None = None) -> None:
    """Print each target (to ``lines``, default stdout), then the JSON line
    on stdout; with ``check``, exit 1 on a miss."""
    for name, t in targets.items():
        sign = "≤" if t["at_most"] else "≥"
        print(f"target {name}: {t['value']} {sign} {t['limit']} {t['what']}".rstrip()
              + f" — {'met' if t['met'] else 'NOT met'}", file=lines or sys.stdout)
    print(json.dumps({"bench": bench, "figures": figures, "targets": targets}, sort_keys=True), flush=True)
    if check and not all(t["met"] for t in targets.values()):
        sys.exit(1)

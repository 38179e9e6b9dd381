"""CPU time of ``brewkb demo`` against a baseline revision, and whether both decide the same.

Runs ``python -m brewkb demo`` from this checkout and from a baseline revision
of the package (extracted with ``git archive`` into a temporary folder),
alternately, ``--repeats`` times each, with git's dates and identity pinned so
that two runs that decide the same write the same commits. Prints each side's
CPU seconds (user + system of the demo and of the git commands it waits for:
on a shared machine far steadier than wall time, also printed), their ratio,
and whether every ref (node branches, ``kb``, ``pr``, the notes) came out
byte-identical and the held-out evaluation gave the same figures.

The baseline defaults to 40918d0, the last revision before the demo's hot
spots were removed (a character diff of whole recipes to break ties, the shop
world built three times for every grade, the scrubbing regexes run on every
message). Target: at most 0.6x its CPU time, with identical results.

    python bench/demo.py [--baseline REV] [--repeats 3] [--small] [--check]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import add_check, checked_repeats, finish, spread, target  # noqa: E402

BASELINE = "40918d0"
TARGET = 0.6
BOOKKEEPING = ("revisions", "effects_of")
"""Keys of ``eval.json`` that say what was measured (so a resumed run measures
nothing again), written since the baseline; the figures are compared without them."""
PINNED = {"GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000",
          "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_COMMITTER_NAME": "bench",
          "GIT_COMMITTER_EMAIL": "bench@example.com", "GIT_CONFIG_NOSYSTEM": "1"}


def extract(rev: str, into: Path) -> Path:
    """The ``brewkb`` package of ``rev`` in ``into``; returns the folder to put on PYTHONPATH."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev, "brewkb"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run_demo(package: Path, target_dir: Path, small: bool, home: Path) -> tuple[float, float, str]:
    """CPU seconds, wall seconds, and a digest of every ref and the evaluation."""
    env = {**os.environ, **PINNED, "PYTHONPATH": str(package), "HOME": str(home)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "brewkb", "demo", "--dir", str(target_dir), *(["--small"] if small else [])],
                   cwd=package, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    refs = subprocess.run(["git", "for-each-ref", "--format=%(objectname) %(refname)"], cwd=target_dir,
                          capture_output=True, check=True).stdout
    evaluation = json.loads((target_dir / "runs" / "demo" / "eval.json").read_text())
    for key in BOOKKEEPING:
        evaluation.pop(key, None)
    figures = json.dumps(evaluation, sort_keys=True).encode()
    return cpu, wall, hashlib.sha256(refs + b"\0" + figures).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help=f"revision to compare with (default {BASELINE})")
    parser.add_argument("--small", action="store_true", help="brewkb demo --small (a tenth of the tasks)")
    add_check(parser)
    args = parser.parse_args()
    repeats = checked_repeats(args)
    with tempfile.TemporaryDirectory() as tmp:
        packages = {"brewkb": ROOT, "baseline": extract(args.baseline, Path(tmp, "baseline"))}
        cpu: dict[str, list[float]] = {side: [] for side in packages}
        wall: dict[str, list[float]] = {side: [] for side in packages}
        digests: dict[str, set[str]] = {side: set() for side in packages}
        for r in range(repeats):
            order = list(packages) if r % 2 == 0 else list(packages)[::-1]
            for side in order:
                c, w, digest = run_demo(packages[side], Path(tmp, f"{side}-{r}", "demo"), args.small,
                                        Path(tmp, "home"))
                cpu[side].append(c)
                wall[side].append(w)
                digests[side].add(digest)
                print(f"run {r + 1} {side:9} CPU {c:6.2f} s  wall {w:6.2f} s  refs+eval {digest[:12]}", flush=True)
    ratio = spread([b / a for a, b in zip(cpu["baseline"], cpu["brewkb"], strict=True)])
    identical = len(digests["brewkb"] | digests["baseline"]) == 1
    figures = {"demo": "small" if args.small else "full", "baseline": args.baseline,
               "cpu_s": {side: spread(v, 2) for side, v in cpu.items()},
               "wall_s": {side: spread(v, 2) for side, v in wall.items()},
               "cpu_ratio": ratio, "identical_results": identical}
    print(f"CPU: brewkb median {figures['cpu_s']['brewkb']['median']} s, baseline {args.baseline} median "
          f"{figures['cpu_s']['baseline']['median']} s; ratio median {ratio['median']} "
          f"(min {ratio['min']}, max {ratio['max']})")
    print(f"refs, notes and evaluation identical to the baseline's: {identical}")
    finish("demo", figures, {
        "cpu_ratio": target(ratio["median"], TARGET, what=f"x the CPU time of {args.baseline}"),
        "identical_results": target(float(identical), 1.0, at_most=False, what="(1: same refs, notes, evaluation)"),
    }, args.check)


if __name__ == "__main__":
    main()

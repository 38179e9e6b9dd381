"""Start-up cost of ``brewkb --help`` against a bare Python start-up.

Runs ``brewkb --help`` (the console script next to this interpreter, else
``python -m brewkb``) and ``python -c pass`` alternately, REPEATS times each,
and prints the medians and their ratio (and, as the floor a CLI built on
click cannot go below, ``python -c 'import click'``). The target is a median of at most
100 ms for ``brewkb --help``; the ratio tells what brewkb adds on this machine.

    python bench/cli_help.py [--repeats 21]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def elapsed(argv: list[str]) -> float:
    """CPU seconds (user + system) the command used: on a shared, loaded
    machine this is far steadier than wall time, which is also printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    WALL.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


WALL: list[float] = []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    script = Path(sys.executable).with_name("brewkb")
    help_argv = [str(script), "--help"] if script.exists() else [sys.executable, "-m", "brewkb", "--help"]
    bare_argv = [sys.executable, "-c", "pass"]
    click_argv = [sys.executable, "-c", "import click"]
    elapsed(help_argv), elapsed(bare_argv)  # warm the file cache
    helps, bares, clicks = [], [], []
    for _ in range(args.repeats):
        helps.append(elapsed(help_argv))
        bares.append(elapsed(bare_argv))
        clicks.append(elapsed(click_argv))
    help_ms, bare_ms = statistics.median(helps) * 1000, statistics.median(bares) * 1000
    help_wall = statistics.median(WALL[2::3]) * 1000
    print(f"{' '.join(Path(a).name if i == 0 else a for i, a in enumerate(help_argv))}: "
          f"median {help_ms:.1f} ms CPU (min {min(helps) * 1000:.1f}; wall median {help_wall:.1f}) "
          f"over {args.repeats} runs")
    print(f"python -c pass: median {bare_ms:.1f} ms CPU (min {min(bares) * 1000:.1f}) over {args.repeats} runs")
    print(f"python -c 'import click' (the floor): median {statistics.median(clicks) * 1000:.1f} ms CPU")
    print(f"ratio: {help_ms / bare_ms:.2f}x python start-up; brewkb adds {help_ms - bare_ms:.1f} ms; "
          f"target ≤ 100 ms: {'met' if help_ms <= 100 else 'NOT met'}")


if __name__ == "__main__":
    main()

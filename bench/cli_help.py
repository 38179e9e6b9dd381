"""Start-up cost of ``brewkb --help`` against a bare Python start-up and ``import click``.

Runs ``brewkb --help`` (the console script next to this interpreter, else
``python -m brewkb``), ``python -c pass``, ``python -c 'import click'`` and
the ``--help`` of a bare click group with as many commands (the floor a CLI
built on click cannot go below: rendering help imports more of click) in
turn, ``--runs`` times each per repetition, ``--repeats`` repetitions, and
prints the medians of CPU time (user + system: on a shared machine far
steadier than wall time, also printed) and what brewkb adds to the floor.

Target: a median CPU time of ``brewkb --help`` at most 1.1x the bare click
group's, measured in the same run (an absolute figure moves with the machine
and its load; the floor moves with them).

    python bench/cli_help.py [--runs 21] [--repeats 3] [--check]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import add_check, checked_repeats, finish, spread, target  # noqa: E402

TARGET_RATIO = 1.1
# a click group with as many commands as brewkb's, printing its help
BARE_GROUP = """
import click
group = click.Group("bare", help="A click group and nothing else.")
for i in range(26):
    group.add_command(click.Command(f"command-{i}", help=f"Does thing number {i} of the bare group."))
group(["--help"])
"""


def measure(argv: list[str]) -> tuple[float, float]:
    """CPU and wall milliseconds of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000, wall * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each command per repetition")
    add_check(parser)
    args = parser.parse_args()
    repeats = checked_repeats(args)
    script = Path(sys.executable).with_name("brewkb")
    commands = {
        "brewkb --help": [str(script), "--help"] if script.exists() else [sys.executable, "-m", "brewkb", "--help"],
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import click'": [sys.executable, "-c", "import click"],
        "a bare click group --help": [sys.executable, "-c", BARE_GROUP],
    }
    for argv in commands.values():
        measure(argv)  # warm the file cache
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    wall: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, argv in commands.items():
                runs[name].append(measure(argv))
        for name, values in runs.items():
            cpu[name].append(statistics.median(c for c, _ in values))
            wall[name].append(statistics.median(w for _, w in values))
    figures = {name: {"cpu_ms": spread(cpu[name], 1), "wall_ms": spread(wall[name], 1)} for name in commands}
    for name in commands:
        c, w = figures[name]["cpu_ms"], figures[name]["wall_ms"]
        print(f"{name:27} CPU median {c['median']:6.1f} ms (repetitions {c['min']:.1f}–{c['max']:.1f}); "
              f"wall median {w['median']:6.1f} ms")
    help_ms = figures["brewkb --help"]["cpu_ms"]["median"]
    floor_ms = figures["a bare click group --help"]["cpu_ms"]["median"]
    figures["adds_to_bare_click_help_ms"] = round(help_ms - floor_ms, 1)
    print(f"brewkb adds {help_ms - floor_ms:.1f} ms to a bare click group's --help "
          f"({args.runs} runs per command per repetition, medians of {repeats} repetitions)")
    figures["ratio_to_bare_click_help"] = round(help_ms / floor_ms, 3)
    finish("cli_help", figures, {"help_cpu_ratio": target(help_ms / floor_ms, TARGET_RATIO,
                                                          what="x the CPU time of a bare click group's --help")},
           args.check)


if __name__ == "__main__":
    main()

"""Peak memory and time of importing a large logs file.

Builds a tau2 results file of about ``--mb`` megabytes (default 200) from the
real one in ../shared/data/tau2-airline: its task list, then its 50
simulations repeated (with new ids and numbered user turns, so each copy is a
conversation of its own) until the file is that big. Then runs
``brewkb import FILE --format tau2`` in a fresh KB ``--repeats`` times (each
into a new run) and reads each child's peak resident memory (``ru_maxrss``)
and wall time. Also measures the import of a file of one simulation, the
memory of the interpreter and brewkb's modules alone.

Prints each run, the median and the spread (min–max), and on its last line
the figures as JSON. With ``--check`` it exits 1 when the median peak is at or
above ``--target-mb`` (default 400).

    python bench/import_memory.py [--mb 200] [--repeats 3] [--target-mb 400] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "tau2-airline" / "claude-sonnet-4-5_airline_default_gpt4.1_1trials.json"


def build(path: Path, megabytes: float, real: dict[str, Any], copies: int | None = None) -> int:
    """Write a results file of about ``megabytes`` (or of ``copies`` simulations); returns the simulation count."""
    sims = real["simulations"]
    head = {k: v for k, v in real.items() if k != "simulations"}
    written = 0
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(head)[:-1] + ', "simulations": [')
        while (copies is None and out.tell() < megabytes * 1e6) or (copies is not None and written < copies):
            sim = sims[written % len(sims)]
            # each copy is another conversation (the import drops exact repeats): its user turns are numbered
            messages = [{**m, "content": f"{m['content']} [{written}]"} if m.get("role") == "user" else m
                        for m in sim["messages"]]
            out.write((", " if written else "") + json.dumps({**sim, "id": f"{sim['id']}-{written}",
                                                               "trial": written // len(sims), "messages": messages}))
            written += 1
        out.write("]}")
    return written


def measure(kb: Path, path: Path, run: str) -> tuple[float, float, dict[str, Any]]:
    """(peak MB, seconds, the import's JSON summary) of one ``brewkb import`` in a child process,
    whose resource usage ``wait4`` returns when it is reaped."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "brewkb", "import", str(path), "--format", "tau2", "--run",
                                  run, "--json"], cwd=kb, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"brewkb import failed ({child.returncode}): {err.read().strip()}")
        return usage.ru_maxrss * 1024 / 1e6, seconds, json.loads(out.read())  # ru_maxrss is in KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="size of the file to import")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-mb", type=float, default=400.0)
    parser.add_argument("--check", action="store_true", help="exit 1 when the median peak misses the target")
    args = parser.parse_args()
    if not REAL.is_file():
        raise SystemExit(f"needs {REAL}")
    real = json.loads(REAL.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        kb = Path(tmp, "kb")
        kb.mkdir()
        subprocess.run([sys.executable, "-m", "brewkb", "init"], cwd=kb, check=True, capture_output=True)
        big, small = Path(tmp, "big.json"), Path(tmp, "one.json")
        sims = build(big, args.mb, real)
        build(small, 0, real, copies=1)
        size = big.stat().st_size / 1e6
        print(f"file: {size:.1f} MB, {sims} simulations (tau2 results object)")
        base, _, _ = measure(kb, small, "one")
        print(f"baseline (a file of one simulation): peak {base:.0f} MB")
        peaks, times = [], []
        for n in range(args.repeats):
            peak, seconds, summary = measure(kb, big, f"big-{n}")
            if summary["imported"] != sims:
                raise SystemExit(f"imported {summary['imported']} of {sims} simulations")
            peaks.append(peak)
            times.append(seconds)
            print(f"run {n + 1}: peak {peak:.0f} MB, {seconds:.1f} s, {summary['imported']} trajectories")
    median_peak, median_time = statistics.median(peaks), statistics.median(times)
    ok = median_peak < args.target_mb
    print(f"peak memory: median {median_peak:.0f} MB (min {min(peaks):.0f}, max {max(peaks):.0f}); "
          f"{median_peak / size:.2f}x the file; target < {args.target_mb:.0f} MB: {'met' if ok else 'MISSED'}")
    print(f"time: median {median_time:.1f} s (min {min(times):.1f}, max {max(times):.1f}); "
          f"{size / median_time:.1f} MB/s")
    print(json.dumps({"file_mb": round(size, 1), "simulations": sims, "baseline_peak_mb": round(base, 1),
                      "peak_mb": {"median": round(median_peak, 1), "min": round(min(peaks), 1),
                                  "max": round(max(peaks), 1)},
                      "seconds": {"median": round(median_time, 2), "min": round(min(times), 2),
                                  "max": round(max(times), 2)},
                      "target_mb": args.target_mb, "met": ok}))
    if args.check and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()

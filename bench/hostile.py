"""What a text written to be slow costs the trust boundary, against an ordinary one.

Log text reaches brewkb's regular expressions (the scrubber's patterns, the
quoting rules) and the offline rules that read requests. A pattern that can
backtrack over a long word costs the square of its length: a 200 KB word
stalls an import or a server's recording for minutes. This bench gives each
of them texts made of one short unit repeated (``a-``, ``{{``, ``[a](``,
``Ab-``, ``1.`` … — the shapes that make such patterns backtrack) at two
lengths, ``--size`` and four times it, and prints the slowest ratio of the
two times: about 4 when the cost grows with the length, 16 when it grows with
its square. Then it imports and distils (offline backend) a log of
conversations whose every text is such a unit repeated to 200,000 characters,
and one of the same size in ordinary words, and prints the ratio of their CPU
times.

Targets: the slowest scaling ratio at most 8 (linear, with room for noise);
the hostile log at most 5x the ordinary one's CPU time (some shapes are slower
for a pattern to pass over than words are, by a constant; a cost that grows
with the square of a text's length makes this hundreds).

    python bench/hostile.py [--size 20000] [--repeats 3] [--check]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import add_check, checked_repeats, finish, spread, target  # noqa: E402
from brewkb.trajectories.instructions import instruction_reason  # noqa: E402
from brewkb.trajectories.scrub import DEFAULT_PATTERNS  # noqa: E402
from brewkb.trajectories.secrets import secret_spans  # noqa: E402

UNITS = ("A", "a", "1", "a.", "a ", "A1", "a-", "1-", "1.", "#1", "+1", "a_", "Ab", "A. ", "a@", "(at)",
         "a at ", "ab at ab dot ", "a dot ", "I am Ab ", "1 Ab ", "1, Ab ", "Ab, ", "Ab-", "1 rue ",
         "password is ", "reservation ", "ignore the ", "the agent ", "ai: ", "[a](", "{{", "{%", "<a ",
         "http:", "+1 (1) ", "AB12 ", "1 1 ", "a?")
WORDS = "please cancel my order because it arrived late and the box was damaged on the way".split()


def _checks() -> dict[str, object]:
    found: dict[str, object] = {kind: re.compile(rx).finditer for kind, rx in DEFAULT_PATTERNS.items()}
    found["secrets"] = secret_spans
    found["quoting rules"] = instruction_reason
    return found


def _seconds(check: object, text: str) -> float:
    began = time.perf_counter()
    result = check(text)  # type: ignore[operator]
    if not isinstance(result, str | type(None) | list):
        list(result)
    return time.perf_counter() - began


def scaling(size: int) -> tuple[float, str]:
    """The slowest ratio of the time at four times ``size`` to the time at ``size``, and what it was."""
    worst, what = 0.0, ""
    for name, check in _checks().items():
        for unit in UNITS:
            short, long = (unit * (n // len(unit)) for n in (size, 4 * size))
            small = min(_seconds(check, short) for _ in range(3))
            if small < 1e-4:  # too fast to time: its long run says the same
                small = 1e-4
            ratio = min(_seconds(check, long) for _ in range(2)) / small
            if ratio > worst:
                worst, what = ratio, f"{name} on {unit!r}"
    return worst, what


def _log(folder: Path, hostile: bool) -> Path:
    lines = []
    for n, unit in enumerate(UNITS[:12]):
        filler = unit if hostile else " ".join(WORDS) + " "
        big = (filler * (200_000 // len(filler) + 1))[:200_000]
        messages = [
            {"role": "user", "content": f"Please cancel order {n}. {big}"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "find_order", "arguments": json.dumps({"order_id": f"W{n}0000", "note": big[:5000]})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"order_id": f"W{n}0000", "note": big})},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {
                "name": "cancel_order", "arguments": json.dumps({"order_id": f"W{n}0000"})}}]},
            {"role": "tool", "tool_call_id": "c2", "content": "Error: " + big},
            {"role": "assistant", "content": "Done. " + big}]
        lines.append(json.dumps({"task_id": f"t{n}", "messages": messages, "success": True}))
    path = folder / ("hostile.jsonl" if hostile else "ordinary.jsonl")
    path.write_text("\n".join(lines) + "\n")
    return path


def _cpu(command: list[str], cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "brewkb", *command], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"brewkb {' '.join(command)} failed: {done.stderr.strip()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def end_to_end(folder: Path, repeat: int) -> dict[str, float]:
    kb = folder / f"kb-{repeat}"
    subprocess.run([sys.executable, "-m", "brewkb", "init", str(kb)], check=True, capture_output=True)
    seconds = {}
    for hostile in (False, True):
        run = "hostile" if hostile else "ordinary"
        seconds[run] = _cpu(["import", str(_log(folder, hostile)), "--format", "openai", "--run", run], kb) + \
            _cpu(["distill", run], kb)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=20_000, help="characters of the shorter text")
    add_check(parser)
    args = parser.parse_args()
    repeats = checked_repeats(args)
    ratios, slowest, logs = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            ratio, what = scaling(args.size)
            times = end_to_end(Path(tmp), repeat)
            ratios.append(ratio)
            slowest.append(what)
            logs.append(times["hostile"] / times["ordinary"])
            print(f"  repeat {repeat + 1}: slowest scaling {ratio:.1f}x ({what}); import + distill CPU "
                  f"{times['hostile']:.2f} s hostile, {times['ordinary']:.2f} s ordinary", flush=True)
    figures = {"scaling_ratio": spread(ratios, 2), "slowest": slowest, "log_ratio": spread(logs, 2),
               "size": args.size}
    targets = {"scaling": target(figures["scaling_ratio"]["median"], 8.0, what="x (4 is linear, 16 quadratic)"),
               "hostile_log": target(figures["log_ratio"]["median"], 5.0, what="x the ordinary log's CPU")}
    finish("hostile", figures, targets, args.check)


if __name__ == "__main__":
    main()

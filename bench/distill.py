"""Distilling logged conversations: held-out retrieval quality and privacy.

Splits the 160 GPT-4o tau-bench airline conversations by task (tasks 0–29 to
learn from, 30–39 held out; every trial of a task stays on its side), imports
the learning part into a fresh KB and runs ``brewkb distill`` on it (offline
backend: deterministic rules, no model). Then, for each held-out conversation,
queries the distilled recipes with (a) its first user turn and (b) all its user
turns, and prints the MRR of the relevant recipe: one named for a
state-changing action of the task's gold actions (a lookup or a hand-off to a
human is not one), or, where the gold actions hold none, for the action the
user asked for (the first action verb of the task's instruction; synonyms
such as change/update count as one). A conversation whose action no recipe
is named for counts as a miss (reciprocal rank 0). Also prints the recipe count and the number of
personal-data matches in the recipes — e-mails, handle-style ids, and every
value that the logs' tool calls and results give under a personal key (user ids,
booking codes, names, dates of birth…) — which must be 0.

    python bench/distill.py [--data ../shared/data/tau-bench-airline] [--learn 0-29] [--held-out 30-39]
                            [--mode bm25|hybrid] [--boosts FIELD=B,...]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from brewkb.config import Boosts, parse_config  # noqa: E402
from brewkb.errors import ConfigError  # noqa: E402
from brewkb.llm.offline import (  # noqa: E402
    action_verb,
    concept_of_tool,
    is_handoff,
    is_lookup,
    is_talk,
    verb_of,
)
from brewkb.recipes import parse_recipe, slugify  # noqa: E402
from brewkb.retrieval.fusion import Vectors, offline_embed  # noqa: E402
from brewkb.retrieval.ranking import Retriever, Searchable  # noqa: E402
from brewkb.trajectories.schema import Outcome, Trajectory  # noqa: E402
from brewkb.trajectories.scrub import Scrubber  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "tau-bench-airline"


def span(text: str) -> range:
    lo, hi = (int(x) for x in text.split("-"))
    return range(lo, hi + 1)


def user_turns(run: dict) -> list[str]:
    return [m["content"] for m in run["traj"] if m.get("role") == "user" and isinstance(m.get("content"), str)]


def relevant(run: dict, names: list[str]) -> set[str]:
    """Recipe names that count as relevant for one held-out conversation
    (empty when no distilled recipe is named for what the task needs: the
    conversation then counts as a miss)."""
    gold = [a["name"] for a in run["info"]["task"]["actions"]]
    changes = {slugify(concept_of_tool(g)) for g in gold if not (is_lookup(g) or is_talk(g) or is_handoff(g))}
    if changes:
        return changes & set(names)
    # the stated request: its first action verb names the recipes of that action
    words = re.findall(r"[a-z]+", run["info"]["task"]["instruction"].lower())
    verb = next((verb_of(v) for w in words if (v := action_verb(w))), None)
    return {n for n in names if verb is not None and verb_of(n.replace("-", " ")) == verb}


def mrr(index: Searchable, query: str, wanted: set[str]) -> float:
    for rank, hit in enumerate(index.search(query, k=len(index)), start=1):
        if hit.name in wanted:
            return 1.0 / rank
    return 0.0


PERSONAL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[a-z]{2,}|[a-z]+_[a-z]+_[0-9]{4}")


def brewkb(cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"brewkb {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--learn", default="0-29")
    parser.add_argument("--held-out", default="30-39")
    parser.add_argument("--per-conversation", action="store_true", help="Print each held-out conversation's ranks.")
    parser.add_argument("--keep", type=Path, default=None, help="Write the distilled recipes into this folder.")
    parser.add_argument("--mode", choices=("bm25", "hybrid"), default="bm25",
                        help="retrieval.mode of the KB: what the search ranks by and what the held-out queries use.")
    parser.add_argument("--boosts", default="", metavar="FIELD=B,...",
                        help="retrieval.boosts of the KB (e.g. text=0,name=2,concept=3,aliases=2,description=3,"
                             "tags=1.5,body=1, the per-field weighting of index schema 1).")
    args = parser.parse_args()
    source = args.data / "gpt-4o-trajectories.json"
    if not source.is_file():
        sys.exit(f"bench/distill.py: no {source}; pass --data with the folder of the tau-bench airline "
                 "conversations (shared/data/tau-bench-airline, beside the repository)")
    given = args.boosts.replace(",", "\n")
    try:  # brewkb's own config checks the names and values
        boosts = parse_config(f"[retrieval.boosts]\n{given}").retrieval.boosts
    except ConfigError as exc:
        sys.exit(f"bench/distill.py: --boosts: {exc}")
    runs = json.loads(source.read_text())
    learn = [r for r in runs if int(r["task_id"]) in span(args.learn)]
    held = [r for r in runs if int(r["task_id"]) in span(args.held_out)]
    with tempfile.TemporaryDirectory() as tmp:
        kb = Path(tmp) / "kb"
        kb.mkdir()
        brewkb(kb, "init")  # init commits its files
        if args.mode != "bm25" or boosts != Boosts():
            config = kb / "brewkb.toml"
            text = config.read_text().replace('mode = "bm25"', f'mode = "{args.mode}"', 1)
            config.write_text(f"{text}\n[retrieval.boosts]\n{given}\n")
            subprocess.run(["git", "commit", "-qam", "retrieval settings"], cwd=kb, check=True)
        logs = Path(tmp) / "learn.json"
        logs.write_text(json.dumps(learn))
        brewkb(kb, "import", str(logs), "--format", "tau-bench", "--run", "air")
        brewkb(kb, "distill", "air")
        files = subprocess.run(["git", "ls-tree", "--name-only", "brew/air/pr", "recipes/"], cwd=kb,
                               capture_output=True, text=True, check=True).stdout.split()
        texts = {f: subprocess.run(["git", "show", f"brew/air/pr:{f}"], cwd=kb, capture_output=True, text=True,
                                   check=True).stdout for f in files if f.endswith(".md")}
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for path, text in texts.items():
            (args.keep / Path(path).name).write_text(text)
    recipes = [parse_recipe(t) for t in texts.values()]
    index = Retriever(boosts, Vectors(offline_embed) if args.mode == "hybrid" else None).index(recipes)
    names = sorted(r.name for r in recipes)
    first, every, unlabelled = [], [], 0
    for run in held:
        wanted = relevant(run, names)
        unlabelled += not wanted
        turns = user_turns(run)
        first.append(mrr(index, turns[0] if turns else "", wanted))
        every.append(mrr(index, " ".join(turns), wanted))
        if args.per_conversation:
            print(f"task {run['task_id']} trial {run['trial']}: relevant {sorted(wanted) or '-'}; reciprocal rank "
                  f"first turn {first[-1]:.2f}, all turns {every[-1]:.2f}")
    leaks = sum(len(PERSONAL.findall(t)) for t in texts.values())
    # and every value the logs' own tool calls name as personal (user ids, booking codes, names, ...)
    scrubber = Scrubber.build()
    values = {v for run in runs for v in scrubber.values_of(Trajectory("x", "", tuple(run["traj"]), Outcome(True, 1.0)))}
    leaks += sum(len(re.findall(rf"(?<![\w@.]){re.escape(v)}(?![\w@])", t)) for v in values for t in texts.values())
    print(f"learn tasks {args.learn} ({len(learn)} conversations), held-out tasks {args.held_out} "
          f"({len(held)} conversations; {unlabelled} need an action no recipe is named for and count as misses)")
    print(f"recipes: {len(recipes)} ({', '.join(names)}); retrieval.mode = {args.mode}"
          + (f", boosts {args.boosts}" if given else ""))
    print(f"held-out MRR, first user turn: {sum(first) / max(1, len(first)):.3f}")
    print(f"held-out MRR, all user turns:  {sum(every) / max(1, len(every)):.3f}")
    labelled = [i for i, run in enumerate(held) if relevant(run, names)]
    if labelled and len(labelled) < len(held):
        print(f"  over the {len(labelled)} conversations whose action has a recipe: first turn "
              f"{sum(first[i] for i in labelled) / len(labelled):.3f}, all turns "
              f"{sum(every[i] for i in labelled) / len(labelled):.3f}")
    print(f"personal-data matches in recipes: {leaks}")


if __name__ == "__main__":
    main()

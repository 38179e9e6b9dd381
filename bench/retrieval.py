"""Retrieval speed and quality: brewkb against bm25s and rank_bm25.

On generated recipes (1,000 and 30,000 by default) the three systems index the
same corpus and answer the same queries, for five query shapes:

- ``desc``: two thirds of a recipe's description words, shuffled;
- ``desc5+noise2``: five of its description words and two common words of the
  vocabulary that need not occur in it;
- ``body4``: four words of its body;
- ``body4+noise2``: four body words and two common words;
- ``short3``: three words of its whole text (name, concept, description, body).

No query is a recipe's own text verbatim, so every MRR can fall short of 1.
The recipes are named ``r<i>``, words no query holds, so the comparison measures
the engine; ``--anchors N`` gives each recipe N quoted requests, which brewkb
scores as units of their own (its best one added to the recipe's score) and
bm25s reads as part of the text; ``--named`` names each after its concept's words, as real recipes
are, and shows what brewkb's default ``name`` boost costs queries made of body
words. For each shape it prints the median and p99 latency of a top-3 query from the raw
text (each system analyses the text: brewkb with its query cache cleared,
bm25s and rank_bm25 through ``brewkb.retrieval.index.analyze``, the same terms the index
holds) and the MRR@100 of the recipe the query was drawn from. brewkb and
bm25s are timed interleaved in one process, ``--repeats`` times; the figures are
the medians over repetitions. rank_bm25 is scored on the first
``--rank-bm25-queries`` queries only at 30,000 recipes (it takes tens of ms a
query), in one repetition. bm25s and rank_bm25 use BM25 with k1=1.2, b=0.75
over each recipe's whole text, as brewkb does per field. Build times include
each system's analysis of the recipes' text (brewkb's index analyses as it
builds; bm25s and rank_bm25 are given ``analyze``'s terms, timed with them).

Targets (``--check``), bm25s being the strongest reference: for every size and
query shape, brewkb's median latency at most bm25s's and its MRR at least
bm25s's less 0.02.

Then compares the hybrid-KB path of the search (one MultiIndex per iteration)
with a fresh index per hybrid KB (skipped with ``--json``).

``--airline`` instead runs the pipeline (import → reflect → concepts →
integrate, offline backend) on the tau-bench airline conversations in a
temporary KB and prints, for each concept's recipe and each of its tasks' texts
(what the search's R_ret ranks it on), the MRR among the distilled recipes:
micro (over task–recipe pairs) and macro (over recipes), for brewkb's default
boosts, for the per-field weighting of index schema 1, with a summary boost, for
bm25s over each recipe's whole text, and for brewkb fused with the offline
embedder (hashed character n-grams) by reciprocal rank fusion
(``retrieval.mode = "hybrid"``). ``--hybrid`` prints that mode's query time and
MRR against BM25 alone on the generated corpus.

    python bench/retrieval.py [--sizes 1000,30000] [--queries 300] [--repeats 3] [--boosts FIELD=B,...] [--named]
                              [--anchors N] [--json] [--check]
    python bench/retrieval.py --airline [--json]
    python bench/retrieval.py --hybrid [--sizes 1000,30000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import bm25s
import numpy as np
from rank_bm25 import BM25Okapi

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import add_check, checked_repeats, finish, target  # noqa: E402
from brewkb.config import Boosts, parse_config  # noqa: E402
from brewkb.errors import ConfigError  # noqa: E402
from brewkb.kb import KB  # noqa: E402
from brewkb.recipes import LEARNED_FROM, Recipe, build_body, slugify  # noqa: E402
from brewkb.retrieval.fusion import Vectors, offline_embed  # noqa: E402
from brewkb.retrieval.index import MultiIndex, RecipeIndex, analyze  # noqa: E402
from brewkb.retrieval.ranking import Retriever  # noqa: E402

SYLLABLES = ["ka", "lo", "mi", "ner", "tos", "vel", "ur", "pi", "sha", "dro", "en", "qua", "rix", "bel",
             "ton", "ga", "fi", "mor", "sel", "tre", "zu", "ap", "wen", "cor", "li", "das", "em", "or"]
SHAPES = ("desc", "desc5+noise2", "body4", "body4+noise2", "short3")
SYSTEMS = ("brewkb", "bm25s", "rank_bm25")
MRR_SLACK = 0.02


def vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


VOCAB = vocabulary(random.Random(0), 20_000)
WEIGHTS = [1 / (i + 1) for i in range(len(VOCAB))]  # Zipf-like


def generate(n: int, seed: int = 0, named: bool = False, anchors: int = 0) -> list[Recipe]:
    """``n`` recipes of Zipf-drawn words, named ``r<i>`` (``named``: after
    their concept's words, ``<concept>-<i>``, as real recipes are), each
    quoting ``anchors`` requests as its anchors (12 words: 8 of its own
    description and body, as a request it served shares words with it, and 4
    drawn from the vocabulary)."""
    rng = random.Random(seed)

    def words(k: int) -> str:
        return " ".join(rng.choices(VOCAB, WEIGHTS, k=k))

    recipes = []
    for i in range(n):
        concept = words(3)
        when, how, pitfalls = words(20), words(80), words(30)
        description = f"{concept} {words(15)}"
        tags = tuple(rng.sample(VOCAB[:50], 2))
        own = description.split() + how.split()  # drawn last: without anchors the corpus is as it was
        requests = [" ".join(rng.sample(own, 8) + words(4).split()) for _ in range(anchors)]
        body = build_body([("When to use", when), ("How to perform", how), ("Pitfalls", pitfalls),
                           (LEARNED_FROM, "\n".join(f'- "{r}"' for r in requests))])
        name = slugify(f"{concept} {i}") if named else f"r{i}"
        recipes.append(Recipe(name=name, description=description, concept=concept, tags=tags, body=body))
    return recipes


def full_text(r: Recipe) -> str:
    return " ".join([r.name.replace("-", " "), r.concept, " ".join(r.aliases), r.description,
                     " ".join(r.tags), r.body])


def _body_words(r: Recipe) -> list[str]:
    return [w for w in r.body.split() if w.isalpha()]


def make_query(shape: str, r: Recipe, rng: random.Random) -> str:
    desc = r.description.split()
    noise = rng.choices(VOCAB[:2000], WEIGHTS[:2000], k=2)
    if shape == "desc":
        return " ".join(rng.sample(desc, max(1, len(desc) * 2 // 3)))
    if shape == "desc5+noise2":
        return " ".join(rng.sample(rng.sample(desc, 5) + noise, 7))
    if shape == "body4":
        return " ".join(rng.sample(_body_words(r), 4))
    if shape == "body4+noise2":
        return " ".join(rng.sample(rng.sample(_body_words(r), 4) + noise, 6))
    if shape == "short3":
        return " ".join(rng.sample([w for w in full_text(r).split() if w.isalpha()], 3))
    raise ValueError(shape)


def percentile(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values), p))


def rr(names: list[str], target: str) -> float:
    return 1 / (names.index(target) + 1) if target in names else 0.0


class Systems:
    """The three systems over one corpus, each answering ``top(text, k)`` with names."""

    def __init__(self, recipes: list[Recipe], boosts: Boosts = Boosts()) -> None:
        self.recipes = recipes
        self.build_s: dict[str, float] = {}
        t = time.perf_counter()
        self.ours = RecipeIndex.build(recipes, boosts)
        self.build_s["brewkb"] = time.perf_counter() - t
        t = time.perf_counter()
        corpus = [analyze(full_text(r)) for r in recipes]
        analysed = time.perf_counter() - t
        self.bm25s = bm25s.BM25(k1=1.2, b=0.75)
        self.bm25s.index(corpus, show_progress=False)
        self.build_s["bm25s"] = time.perf_counter() - t
        t = time.perf_counter()
        self.okapi = BM25Okapi(corpus, k1=1.2, b=0.75)
        self.build_s["rank_bm25"] = time.perf_counter() - t + analysed

    def top(self, system: str, text: str, k: int) -> list[str]:
        if system == "brewkb":
            self.ours._plans.clear()  # time the analysis too, as for the others
            return [h.name for h in self.ours.search(text, k)]
        terms = analyze(text)
        if system == "bm25s":
            if not terms:
                return []
            docs, _ = self.bm25s.retrieve([terms], k=min(k, len(self.recipes)), show_progress=False, n_threads=0)
            return [self.recipes[i].name for i in docs[0]]
        scores = self.okapi.get_scores(terms)
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
        return [self.recipes[i].name for i in top[np.argsort(-scores[top], kind="stable")]]


def measure(systems: Systems, queries: list[tuple[str, str]], names: tuple[str, ...], reps: int,
            rng: random.Random) -> dict[str, dict[str, float]]:
    lat: dict[str, list[list[float]]] = {s: [] for s in names}
    for _ in range(reps):
        run: dict[str, list[float]] = {s: [] for s in names}
        for text, _target in queries:
            order = list(names)
            rng.shuffle(order)  # interleaved, in a random order per query
            for system in order:
                t = time.perf_counter()
                systems.top(system, text, 3)
                run[system].append(time.perf_counter() - t)
        for s in names:
            lat[s].append(run[s])
    out = {}
    for s in names:
        mrr = statistics.mean(rr(systems.top(s, text, 100), target) for text, target in queries)
        medians = [statistics.median(r) * 1e3 for r in lat[s]]
        out[s] = {"median_ms": round(statistics.median(medians), 4),
                  "median_ms_spread": [round(min(medians), 4), round(max(medians), 4)],
                  "p99_ms": round(statistics.median(percentile(r, 99) for r in lat[s]) * 1e3, 4),
                  "mrr": round(mrr, 4), "queries": len(queries), "reps": reps}
    return out


def bench_size(n: int, n_queries: int, reps: int, slow_queries: int, log: Callable[[str], None],
               boosts: Boosts = Boosts(), named: bool = False, anchors: int = 0) -> dict:
    rng = random.Random(n)
    systems = Systems(generate(n, named=named, anchors=anchors), boosts)
    log(f"\n{n} recipes; build s (analysis included): "
        + ", ".join(f"{s} {t:.2f}" for s, t in systems.build_s.items()))
    picks = rng.sample(range(n), min(n_queries, n))
    result: dict[str, dict] = {"build_s": {k: round(v, 3) for k, v in systems.build_s.items()}}
    for shape in SHAPES:
        queries = [(make_query(shape, systems.recipes[i], rng), systems.recipes[i].name) for i in picks]
        figures = measure(systems, queries, ("brewkb", "bm25s"), reps, rng)
        slow = queries if n <= 1000 else queries[:slow_queries]
        figures |= measure(systems, slow, ("rank_bm25",), reps if n <= 1000 else 1, rng)
        result[shape] = figures
        log(f"  {shape:14}" + "".join(
            f"  {s} {f['median_ms']:.3f}/{f['p99_ms']:.3f} ms mrr {f['mrr']:.3f}" for s, f in figures.items()))
    return result


def bench_hybrids(concepts: int = 25, per_concept: int = 3, seed: int = 1) -> None:
    rng = random.Random(seed)
    base_list = generate(concepts, seed)
    base = {r.name: r for r in base_list}
    variants = generate(concepts * per_concept, seed + 1)
    candidates = {}
    for j, v in enumerate(variants):
        slot = base_list[j % concepts]
        # a candidate keeps its concept's name and half of its description
        mixed = slot.description.split()[: 8] + v.description.split()[:8]
        candidates[f"c{j}"] = (slot.name, v.replace(name=slot.name, concept=slot.concept,
                                                    description=" ".join(mixed)))
    queries = {cid: [" ".join(rng.sample(r.description.split(), 4)) for _ in range(5)]
               for cid, (_, r) in candidates.items()}

    t = time.perf_counter()
    multi = MultiIndex(base, candidates)
    multi_top = {cid: [[h.recipe for h in multi.search(q, 3, candidate=cid)] for q in qs] for cid, qs in queries.items()}
    multi_time = time.perf_counter() - t

    t = time.perf_counter()
    fresh_top = {}
    for cid, (slot, recipe) in candidates.items():
        hybrid = RecipeIndex.build(list({**base, slot: recipe}.values()))
        fresh_top[cid] = [[h.recipe for h in hybrid.search(q, 3)] for q in queries[cid]]
    fresh_time = time.perf_counter() - t

    pairs = [(multi_top[c][i], fresh_top[c][i]) for c in candidates for i in range(len(queries[c]))]
    same3 = sum(a == b for a, b in pairs) / len(pairs)
    same1 = sum(a[:1] == b[:1] for a, b in pairs) / len(pairs)
    n = len(candidates)
    print(f"\nhybrid KBs: {concepts} concepts x {per_concept} candidates, 5 queries each")
    print(f"  one MultiIndex:          {multi_time / n * 1e3:.2f} ms per hybrid (build + queries)")
    print(f"  fresh index per hybrid:  {fresh_time / n * 1e3:.2f} ms per hybrid")
    print(f"  speed-up:                {fresh_time / multi_time:.1f}x")
    print(f"  same top-1: {same1:.1%}   same top-3 (order included): {same3:.1%}   (shared document frequencies)")


AIRLINE = ROOT.parent / "shared" / "data" / "tau-bench-airline" / "gpt-4o-trajectories.json"
SCHEMA_1 = Boosts(text=0, summary=0, name=2, concept=3, aliases=2, description=3, tags=1.5, body=1)


def airline_kb(root: Path) -> tuple[list[Recipe], list[tuple[str, str]]]:
    """Recipes distilled from the airline conversations, and (recipe, task text) pairs."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    brewkb = [sys.executable, "-m", "brewkb"]
    subprocess.run([*brewkb, "init", str(root)], check=True, capture_output=True, env=env)  # init commits
    for step in ([*brewkb, "import", str(AIRLINE), "--format", "tau-bench", "--run", "air"],
                 [*brewkb, "reflect", "air"], [*brewkb, "concepts", "air"], [*brewkb, "integrate", "air", "--write"]):
        subprocess.run(step, cwd=root, check=True, capture_output=True, env=env)
    concepts = json.loads((root / "runs" / "air" / "concepts.json").read_text())["concepts"]
    texts = {}
    for line in (root / "runs" / "air" / "rollouts.jsonl").read_text().splitlines():
        row = json.loads(line)
        texts[row["task_id"]] = row["task"]
    pairs = [(c["slug"], texts[t]) for c in concepts for t in c["q_train"] + c["q_eval"] if t in texts]
    return KB.open(root).recipes(), pairs


def bench_airline() -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        recipes, pairs = airline_kb(Path(tmp) / "kb")
    names = [r.name for r in recipes]
    okapi = bm25s.BM25(k1=1.2, b=0.75)
    okapi.index([analyze(full_text(r)) for r in recipes], show_progress=False)

    def bm25s_rank(name: str, text: str) -> int:
        docs, _ = okapi.retrieve([analyze(text)], k=len(names), show_progress=False, n_threads=0)
        order = [names[i] for i in docs[0]]
        return order.index(name) + 1

    systems: dict[str, Callable[[str, str], int]] = {"bm25s": bm25s_rank}
    for label, boosts in (("brewkb", Boosts()), ("brewkb schema-1 boosts", SCHEMA_1),
                          ("brewkb summary 0.2", Boosts(summary=0.2))):
        systems[label] = RecipeIndex.build(recipes, boosts).rank
    # retrieval.mode = "hybrid" with the offline embedder
    systems["brewkb hybrid (offline embedder, RRF)"] = Retriever(Boosts(), Vectors(offline_embed)).index(recipes).rank
    out = {}
    for label, rank in systems.items():
        per: dict[str, list[float]] = {}
        for name, text in pairs:
            place = rank(name, text)
            per.setdefault(name, []).append(1 / place if place else 0.0)
        out[label] = {"mrr_micro": round(statistics.mean(v for vs in per.values() for v in vs), 4),
                      "mrr_macro": round(statistics.mean(statistics.mean(vs) for vs in per.values()), 4),
                      "pairs": len(pairs), "recipes": len(recipes)}
    return out


def bench_hybrid(sizes: list[int], n_queries: int) -> None:
    """retrieval.mode = "hybrid" (offline embedder) against BM25 alone on the generated corpus."""
    for n in sizes:
        recipes = generate(n)
        rng = random.Random(n)
        picks = rng.sample(range(n), min(n_queries, n))
        t = time.perf_counter()
        fused = Retriever(Boosts(), Vectors(offline_embed)).index(recipes)
        fused.search("warm up", 3)  # embeds every recipe once
        first = time.perf_counter() - t
        lexical = RecipeIndex.build(recipes)
        for shape in ("desc", "body4"):
            queries = [(make_query(shape, recipes[i], rng), f"r{i}") for i in picks]
            figures = []
            for index in (fused, lexical):
                times = []
                for text, _ in queries:
                    if isinstance(index, RecipeIndex):
                        index._plans.clear()
                    t = time.perf_counter()
                    index.search(text, 3)
                    times.append(time.perf_counter() - t)
                ranks = [index.rank(target, text) for text, target in queries]
                figures.append((statistics.median(times) * 1e3, statistics.mean(1 / r if r else 0.0 for r in ranks)))
            (h_ms, h_mrr), (b_ms, b_mrr) = figures
            print(f"{n:6} recipes {shape:6} hybrid {h_ms:.3f} ms MRR {h_mrr:.3f}   bm25 {b_ms:.3f} ms MRR {b_mrr:.3f}"
                  f"   (embedding the recipes: {first:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,30000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rank-bm25-queries", type=int, default=40)
    parser.add_argument("--json", action="store_true", help="print only the JSON line on stdout (the rest on stderr)")
    parser.add_argument("--airline", action="store_true", help="MRR on the tau-bench airline task texts")
    parser.add_argument("--hybrid", action="store_true", help="cost and MRR of retrieval.mode = hybrid")
    parser.add_argument("--boosts", default="", metavar="FIELD=B,...",
                        help="brewkb's retrieval.boosts on the generated corpus (e.g. summary=0.2)")
    parser.add_argument("--named", action="store_true",
                        help="name the generated recipes after their concept's words, so the name boost counts")
    parser.add_argument("--anchors", type=int, default=0, metavar="N",
                        help="give each generated recipe N quoted requests (anchors, each a retrieval unit)")
    add_check(parser)
    args = parser.parse_args()
    repeats = checked_repeats(args)
    if args.check and (args.airline or args.hybrid or args.named):
        parser.error("--check measures the default comparison with bm25s; drop --airline / --hybrid / --named")
    if args.hybrid:
        bench_hybrid([int(x) for x in args.sizes.split(",")], min(args.queries, 200))
        return
    if args.airline:
        if not AIRLINE.is_file():
            sys.exit(f"bench/retrieval.py: no {AIRLINE}; --airline reads the tau-bench airline conversations "
                     "of shared/data, beside the repository")
        figures = bench_airline()
        print(json.dumps({"airline": figures}, indent=1) if args.json else "\n".join(
            f"{label:32} MRR micro {f['mrr_micro']:.3f}  macro {f['mrr_macro']:.3f}  "
            f"({f['pairs']} task-recipe pairs, {f['recipes']} recipes)" for label, f in figures.items()))
        return
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else print
    try:  # brewkb's own config checks the names and values
        boosts = parse_config("[retrieval.boosts]\n" + args.boosts.replace(",", "\n")).retrieval.boosts
    except ConfigError as exc:
        sys.exit(f"bench/retrieval.py: --boosts: {exc}")
    sizes = {str(n): bench_size(n, args.queries, repeats, args.rank_bm25_queries, log, boosts, args.named, args.anchors)
             for n in (int(s) for s in args.sizes.split(","))}
    if not args.json:
        bench_hybrids()
    targets = {}
    for n, shapes in sizes.items():
        for shape in SHAPES:
            ours, theirs = shapes[shape]["brewkb"], shapes[shape]["bm25s"]
            targets[f"{n}/{shape}/latency"] = target(ours["median_ms"] / theirs["median_ms"], 1.0,
                                                     what="x bm25s's median latency")
            targets[f"{n}/{shape}/mrr"] = target(ours["mrr"] - theirs["mrr"], -MRR_SLACK, at_most=False,
                                                 what="MRR minus bm25s's")
    finish("retrieval", {"sizes": sizes}, targets, args.check, lines=sys.stderr if args.json else None)


if __name__ == "__main__":
    main()

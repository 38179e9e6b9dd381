from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import brewkb.retrieval.postings
from brewkb.config import Boosts
from brewkb.kb import KB
from brewkb.recipes import Recipe, build_body, render_recipe, slugify
from brewkb.retrieval.index import SCHEMA_VERSION, MultiIndex, RecipeIndex
from brewkb.retrieval.postings import Plan, Postings
from brewkb.retrieval.ranking import (
    approx_tokens,
    mrr,
    open_index,
    render_context,
    retrieve,
)
from tests.conftest import AIRLINE, MakeRepo

KB_RECIPES = [
    Recipe(name="export-as-pdf", description="Export a document or report as a PDF file.",
           concept="PDF export", aliases=("save as pdf",), tags=("files",),
           body=build_body([("How to perform", "1. `export(doc, format='pdf')`")])),
    Recipe(name="print-document", description="Send a document to a printer.", concept="Printing",
           body=build_body([("How to perform", "1. `print(doc)`"),
                            ("Pitfalls", "A PDF export is not a print; export pdf pdf pdf only if asked.")])),
    Recipe(name="cancel-order", description="Cancel a pending order at the customer's request.",
           concept="Order cancellation", body=build_body([("How to perform", "1. `cancel_order(id)`")])),
]


@pytest.fixture
def index() -> RecipeIndex:
    return RecipeIndex.build(KB_RECIPES)


def test_a_pdf_question_finds_the_export_recipe_first(index: RecipeIndex) -> None:
    hits = retrieve(index, "How do I export my report to PDF?", k=3)
    assert [h.name for h in hits][:2] == ["export-as-pdf", "print-document"]
    assert hits[0].concept == "PDF export"
    assert hits[0].snippet == "Export a document or report as a PDF file."
    assert hits[0].score > hits[1].score
    assert [h.name for h in retrieve(index, "cancelled orders", k=1)] == ["cancel-order"]  # stemming


def test_a_placeholder_of_personal_data_is_no_index_term() -> None:
    renamed = Recipe(name="rename-passenger", description='Requests such as: "Book it for <first_name> <last_name>."',
                     body=build_body([("How to perform", "1. `update_passengers(reservation_id, passengers)`")]))
    index = RecipeIndex.build([renamed, *KB_RECIPES])
    assert retrieve(index, "what is the first name on the order?", k=1)[0].name == "cancel-order"
    assert retrieve(index, "update the passengers", k=1)[0].name == "rename-passenger"


def test_field_boosts_change_the_order() -> None:
    query = "pdf"
    body_only = RecipeIndex.build(KB_RECIPES, Boosts(text=0.0, name=0.0, aliases=0.0, body=1.0))
    assert [h.name for h in retrieve(body_only, query, 3)] == ["print-document", "export-as-pdf"]
    description_only = RecipeIndex.build(KB_RECIPES, Boosts(text=0.0, name=0.0, aliases=0.0, description=1.0))
    assert [h.name for h in retrieve(description_only, query, 3)] == ["export-as-pdf"]


@pytest.mark.parametrize("query", ["what's new?", "AND", "(x", "foo:bar", "", "OR NOT", '"', "pdf AND (",
                                   "*", "name:export-as-pdf", "ü" * 300, "\x00"])
def test_odd_queries_never_raise(index: RecipeIndex, query: str) -> None:
    hits = retrieve(index, query, k=3)
    assert isinstance(hits, list) and len(hits) <= 3
    assert all(h.name in {r.name for r in KB_RECIPES} for h in hits)


def test_odd_query_with_words_still_finds(index: RecipeIndex) -> None:
    assert retrieve(index, "pdf AND (export", 1)[0].name == "export-as-pdf"


def test_mrr_by_hand() -> None:
    docs = [
        Recipe(name="alpha", description="apples", body="apples apples"),
        Recipe(name="beta", description="bananas", body="apples"),
        Recipe(name="gamma", description="cherries", body="cherries"),
    ]
    index = RecipeIndex.build(docs)
    # "apples": alpha 1st, beta 2nd. "bananas": beta 1st. "cherries": beta absent.
    assert [h.name for h in retrieve(index, "apples", 3)] == ["alpha", "beta"]
    assert mrr("beta", ["apples", "bananas", "cherries"], index) == pytest.approx((1 / 2 + 1 + 0) / 3)
    assert mrr("alpha", ["apples"], index) == 1.0
    assert mrr("alpha", [], index) == 0.0


def test_render_context_respects_the_budget(index: RecipeIndex) -> None:
    hits = retrieve(index, "export my report as a pdf file and print it", 3)
    full = render_context(hits, budget_tokens=10_000)
    assert full.index("## Recipe: export-as-pdf") < full.index("## Recipe: print-document")
    assert "`export(doc, format='pdf')`" in full
    small = render_context(hits, budget_tokens=40)
    assert approx_tokens(small) <= 41
    assert "[…trimmed]" in small and "## Recipe: print-document" not in small
    assert render_context([], 100) == ""


def test_hybrid_kbs_from_one_multi_index() -> None:
    base = {r.name: r for r in KB_RECIPES}
    better = KB_RECIPES[2].replace(description="Cancel a pending order; refund goes back automatically.")
    worse = KB_RECIPES[2].replace(description="Order stuff.", concept="Orders", body="misc")
    multi = MultiIndex(base, {"c1": ("cancel-order", better), "c2": ("cancel-order", worse)})
    in_c1 = multi.search("refund a cancelled order", 3, candidate="c1")
    assert in_c1[0].recipe == better
    assert sum(h.name == "cancel-order" for h in in_c1) == 1  # never the base and the candidate together
    in_base = multi.search("pending order", 3)
    assert in_base[0].recipe == KB_RECIPES[2]
    assert len(multi.hybrid("c2")) == 3
    assert mrr("cancel-order", ["pending"], multi.hybrid("c2")) == 0.0
    assert mrr("cancel-order", ["pending"], multi.hybrid("c1")) == 1.0


def _kb(make_repo: MakeRepo) -> Path:
    return make_repo({f"recipes/{r.name}.md": render_recipe(r) for r in KB_RECIPES})


def test_index_cache_follows_the_content(make_repo: MakeRepo) -> None:
    root = _kb(make_repo)
    kb = KB.open(root)
    first = open_index(kb)
    folder = root / ".brewkb" / "index" / f"v{SCHEMA_VERSION}"
    assert len(list(folder.iterdir())) == 1
    open_index(kb)
    assert len(list(folder.iterdir())) == 1  # unchanged: not rebuilt
    path = root / "recipes" / "cancel-order.md"
    path.write_text(path.read_text().replace("Cancel a pending order", "Cancel or annul a pending order"))
    assert retrieve(open_index(kb), "annul", 1)[0].name == "cancel-order"  # stale index not served
    assert retrieve(first, "annul", 1) == []
    assert retrieve(open_index(kb, "HEAD"), "annul", 1) == []  # the committed state
    assert len(list(folder.iterdir())) == 3


def test_search_cli(make_repo: MakeRepo) -> None:
    root = _kb(make_repo)
    out = subprocess.run([sys.executable, "-m", "brewkb", "search", "export to pdf", "--json", "-k", "2"],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert [d["name"] for d in data] == ["export-as-pdf", "print-document"]
    assert data[0]["path"] == "recipes/export-as-pdf.md" and set(data[0]) == {"name", "score", "concept", "path"}
    text = subprocess.run([sys.executable, "-m", "brewkb", "search", "AND (", "--rev", "HEAD"],
                          cwd=root, capture_output=True, text=True, check=True).stdout
    assert text.strip() == "No recipe matches."


def _inconsistent(path: Path) -> None:
    with np.load(path) as data:
        arrays = dict(data)
    arrays["indptr"] = arrays["indptr"][:-2]
    with path.open("wb") as out:
        np.savez(out, **arrays)


@pytest.mark.parametrize("damage", [
    lambda p: p.write_bytes(p.read_bytes()[:100]),  # cut short, as by a full disk
    lambda p: p.write_bytes(b""),
    _inconsistent,  # a whole file whose arrays do not agree
])
def test_a_damaged_index_is_built_again_with_a_warning(make_repo: MakeRepo, damage: Callable[[Path], None]) -> None:
    root = _kb(make_repo)
    search = [sys.executable, "-m", "brewkb", "search", "export to pdf", "--json", "-k", "1"]
    subprocess.run(search, cwd=root, capture_output=True, check=True)
    (stored,) = (root / ".brewkb" / "index" / f"v{SCHEMA_VERSION}").glob("*/postings.npz")
    whole = stored.read_bytes()
    damage(stored)
    done = subprocess.run(search, cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [d["name"] for d in json.loads(done.stdout)] == ["export-as-pdf"]
    assert "cannot be read" in done.stderr and "building it again" in done.stderr
    assert "Traceback" not in done.stderr
    assert stored.stat().st_size == len(whole)  # built again (zip entries carry the time, so not byte for byte)


def test_search_cli_follows_the_configured_boosts(make_repo: MakeRepo) -> None:
    root = _kb(make_repo)

    def search(query: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "brewkb", "search", query, "--json"],
                              cwd=root, capture_output=True, text=True)

    assert [d["name"] for d in json.loads(search("pdf").stdout)] == ["export-as-pdf", "print-document"]
    # the body alone: "pdf" four times in print-document's pitfalls; the cached
    # whole-text index of the same recipes is not served for other boosts
    (root / "brewkb.toml").write_text("[retrieval.boosts]\ntext = 0\nname = 0\naliases = 0\nbody = 1\n")
    assert [d["name"] for d in json.loads(search("pdf").stdout)] == ["print-document", "export-as-pdf"]
    (root / "brewkb.toml").write_text("[retrieval.boosts]\ntext = 0\nname = 0\naliases = 0\n")
    failed = search("pdf")
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert "retrieval.boosts: every boost is 0" in failed.stderr and failed.stderr.count("\n") == 1


def _policy_recipes() -> list[Recipe]:
    text = (AIRLINE / "policy.md").read_text()
    sections = re.split(r"(?m)^## ", text)[1:]
    recipes = []
    for section in sections:
        title, _, body = section.partition("\n")
        first = next(line for line in body.splitlines() if line.strip())
        recipes.append(Recipe(name=slugify(title), description=first.strip("- ").strip(),
                              concept=title.strip(), body=body))
    return recipes


@pytest.mark.skipif(not AIRLINE.is_dir(), reason="needs ../shared/data/tau-bench-airline")
def test_airline_policy_kb_finds_the_cancellation_section(make_repo: MakeRepo) -> None:
    recipes = _policy_recipes()
    assert [r.name for r in recipes] == ["domain-basic", "book-flight", "modify-flight", "cancel-flight", "refund"]
    root = make_repo({f"recipes/{r.name}.md": render_recipe(r) for r in recipes})
    out = subprocess.run([sys.executable, "-m", "brewkb", "search", "cancel my reservation", "--json"],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    assert json.loads(out)[0]["name"] == "cancel-flight"


def test_mcp_round_trip(make_repo: MakeRepo) -> None:
    pytest.importorskip("mcp")  # an install without the [mcp] extra; the test extra includes it
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    root = _kb(make_repo)

    async def session() -> tuple[list[str], Any, str, Any]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "brewkb", "mcp"], cwd=str(root))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            found = await client.call_tool("search_recipes", {"query": "export to pdf", "k": 2})
            one = await client.call_tool("search_recipes", {"query": "export to pdf", "k": 0})
            assert [r["name"] for r in one.structured_content["result"]] == ["export-as-pdf"]  # k is held at ≥ 1
            recipe = await client.call_tool("get_recipe", {"name": "cancel-order"})
            missing = await client.call_tool("get_recipe", {"name": "nope"})
            return tools, found.structured_content, recipe.content[0].text, missing

    tools, found, recipe_text_, missing = asyncio.run(session())
    assert tools == ["get_recipe", "search_recipes"]
    assert [r["name"] for r in found["result"]] == ["export-as-pdf", "print-document"]
    assert recipe_text_ == render_recipe(KB_RECIPES[2])
    assert missing.is_error
    assert "no recipe named 'nope'" in missing.content[0].text  # the client reads what went wrong


# A stray query word in another recipe's short description must not outscore
# several words of the right recipe's body.
AIRLINE_LIKE = [
    Recipe(name="baggage-allowance", description="Tell a passenger how many bags they may check.",
           concept="Baggage allowance",
           body=build_body([("How to perform", "1. `get_user_details(user_id)` for the membership tier\n"
                             "2. Count free checked bags per cabin: regular members get none in basic economy, "
                             "silver members one extra, gold members two extra"),
                            ("Pitfalls", "Each extra bag costs 50 dollars; never waive the fee.")])),
    Recipe(name="change-flight", concept="Flight change",
           description="Move a reservation to another flight and charge the fare difference to a member's card.",
           body=build_body([("How to perform", "1. `search_direct_flight(origin, destination, date)`\n"
                             "2. `update_reservation_flights(reservation_id, cabin, flights, payment_id)`")])),
    Recipe(name="cancel-reservation", description="Cancel a reservation and refund it when the policy allows.",
           concept="Reservation cancellation",
           body=build_body([("How to perform", "1. Check the cancellation reason and insurance\n"
                             "2. `cancel_reservation(reservation_id)`")])),
    Recipe(name="gold-upgrade", description="Free cabin upgrade for gold passengers.", concept="Upgrades",
           body=build_body([("How to perform", "1. `update_reservation_flights(reservation_id, cabin, flights, "
                             "payment_id)` with the new cabin")])),
]
SCHEMA_1 = Boosts(text=0.0, summary=0.0, name=2.0, concept=3.0, aliases=2.0, description=3.0, tags=1.5, body=1.0)


@pytest.mark.parametrize(("query", "expected"), [
    ("never waive the fee for gold", ["baggage-allowance", "gold-upgrade"]),  # body words + 1 description word
    ("fee for an extra bag, member card charge", ["baggage-allowance", "change-flight"]),
    ("check insurance reason card", ["cancel-reservation", "change-flight", "baggage-allowance"]),
    ("silver members extra checked bags", ["baggage-allowance", "cancel-reservation", "change-flight"]),
])
def test_body_words_beat_a_stray_description_word(query: str, expected: list[str]) -> None:
    index = RecipeIndex.build(AIRLINE_LIKE)
    assert [h.name for h in retrieve(index, query, 3)] == expected
    assert index.rank(expected[0], query) == 1
    # the per-field weighting of index schema 1 (still configurable) ranks the
    # first three the other way round
    old = RecipeIndex.build(AIRLINE_LIKE, SCHEMA_1)
    assert (old.rank(expected[0], query) == 1) == (query.startswith("silver"))


def test_rank_agrees_with_search_and_ignores_non_members() -> None:
    index = RecipeIndex.build(AIRLINE_LIKE)
    query = "flights payment origin"
    names = [h.name for h in retrieve(index, query, len(index))]
    assert names == ["change-flight", "gold-upgrade"]
    assert [index.rank(n, query) for n in names] == [1, 2]
    assert index.rank("baggage-allowance", query) == 0  # not matched
    assert index.rank("no-such-recipe", query) == 0
    base = {r.name: r for r in AIRLINE_LIKE}
    moved = AIRLINE_LIKE[3].replace(description="Upgrades for gold passengers.", body="Nothing about that.")
    multi = MultiIndex(base, {"c": ("gold-upgrade", moved)})
    assert multi.rank("gold-upgrade", "new cabin", candidate=None) == 1
    assert multi.rank("gold-upgrade", "new cabin", candidate="c") == 0  # its candidate does not match
    assert multi.hybrid("c").rank("change-flight", "cabin") == 1


HYBRID_RECIPES = KB_RECIPES + [
    Recipe(name="refund-payment", description="Refund a payment to the customer's card.", concept="Refunds",
           body=build_body([("How to perform", "1. `refund(payment_id)`")])),
]


def _search_json(root: Path, query: str, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "brewkb", "search", query, "--json"], cwd=root,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return [d["name"] for d in json.loads(done.stdout)]


def test_hybrid_mode_finds_a_misspelt_query_that_bm25_misses(make_repo: MakeRepo) -> None:
    root = make_repo({f"recipes/{r.name}.md": render_recipe(r) for r in HYBRID_RECIPES})
    assert _search_json(root, "refnud paymnet") == []  # no index term in common
    (root / "brewkb.toml").write_text('[retrieval]\nmode = "hybrid"\n')
    assert _search_json(root, "refnud paymnet")[0] == "refund-payment"  # character n-grams
    # words BM25 knows keep their place at the top
    assert _search_json(root, "export to pdf")[0] == "export-as-pdf"
    (root / "brewkb.toml").write_text('[retrieval]\nmode = "dense"\n')
    bad = subprocess.run([sys.executable, "-m", "brewkb", "search", "pdf"], cwd=root, capture_output=True, text=True)
    assert bad.returncode == 1 and "retrieval.mode" in bad.stderr and "hybrid" in bad.stderr


def test_hybrid_vectors_come_from_the_embeddings_endpoint_once(make_repo: MakeRepo) -> None:
    from brewkb.retrieval.fusion import offline_embed
    from tests.fakes.openai_server import FakeOpenAI

    root = make_repo({f"recipes/{r.name}.md": render_recipe(r) for r in HYBRID_RECIPES})
    with FakeOpenAI(embed=lambda texts: offline_embed(texts).tolist()) as fake:
        (root / "brewkb.toml").write_text(f'[llm]\nbackend = "openai"\nbase_url = "{fake.base_url}"\n'
                                          '[retrieval]\nmode = "hybrid"\n')
        assert _search_json(root, "refnud paymnet")[0] == "refund-payment"
        asked = [body for path, body in fake.requests if path.endswith("/embeddings")]
        assert asked and all(body["model"] == "fake" for body in asked)  # the one model the server lists
        assert sum(len(body["input"]) for body in asked) == len(HYBRID_RECIPES) + 1  # every recipe, the query
        assert _search_json(root, "refnud paymnet")[0] == "refund-payment"
        assert len([p for p, _ in fake.requests if p.endswith("/embeddings")]) == len(asked)  # from the cache


def test_fused_rank_agrees_with_fused_search() -> None:
    from brewkb.retrieval.fusion import Vectors, offline_embed
    from brewkb.retrieval.ranking import Retriever

    index = Retriever(Boosts(), Vectors(offline_embed)).index(HYBRID_RECIPES)
    for query in ("export my report as pdf", "refnud", "cancel the order", "printer"):
        names = [h.name for h in index.search(query, len(index))]
        assert names and all(index.rank(n, query) == place for place, n in enumerate(names, start=1))
    assert index.rank("no-such-recipe", "pdf") == 0 and index.search("", 3) == []


def _exhaustive(postings: Postings, plan: Plan, members: np.ndarray) -> list[tuple[float, int]]:
    # Every posting scored, in the plan's order (the order the engine adds in).
    acc = np.zeros(postings.n, np.float32)
    for _, key, weight in plan.keys:
        start, end = postings._bounds[key], postings._bounds[key + 1]
        acc[postings._docs[start:end]] += np.float32(weight) * postings._scores[start:end]
    docs = np.flatnonzero((acc > 0) & members)
    order = np.lexsort((docs, -acc[docs]))
    return [(float(acc[docs[i]]), int(docs[i])) for i in order]


@pytest.mark.parametrize("pruned", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_pruned_ranking_equals_scoring_every_posting(seed: int, pruned: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if pruned:  # small queries are scored in full; here every query takes the pruning path
        monkeypatch.setattr(brewkb.retrieval.postings, "PLAIN_POSTINGS", 0)
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(400)]
    weights = [1 / (i + 1) for i in range(len(vocab))]  # common words in most documents, rare ones in few
    documents = [{"text": rng.choices(vocab, weights, k=rng.randint(5, 60)),
                  "summary": rng.choices(vocab, weights, k=rng.randint(0, 8))} for _ in range(600)]
    postings = Postings.build(documents)
    assert postings._rows and any(e - s < 40 for s, e in zip(postings._bounds, postings._bounds[1:]))
    for _ in range(60):
        query = {f"{field}:{w}": rng.choice([1.0, 2.0, 0.3])
                 for w in rng.choices(vocab, weights, k=rng.randint(1, 9)) for field in ("text", "summary")}
        plan = postings.plan(query)
        members = np.array([rng.random() < 0.9 for _ in range(600)])
        full = _exhaustive(postings, plan, members)
        for k in (1, 3, 16):
            assert postings.top(plan, k, members) == full[:k]
        assert postings.top(plan, 3) == _exhaustive(postings, plan, np.ones(600, bool))[:3]
        place = {doc: i + 1 for i, (_, doc) in enumerate(full)}
        for doc in rng.sample(range(600), 40):
            if members[doc]:
                assert postings.rank(plan, doc, members) == place.get(doc, 0)

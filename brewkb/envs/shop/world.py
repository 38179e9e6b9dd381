"""The shop's state, generated from a seed: customers, products, orders.

A simulated customer-support desk modelled on tau-bench's retail domain, with
its own data: names, catalogue and addresses are made up here. The state is
plain JSON so it copies, dumps and hashes canonically.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
from functools import lru_cache
from typing import Any

__all__ = ["generate", "state_hash", "CATALOGUE", "COLORS", "SIZES", "REASONS", "State"]

State = dict[str, Any]

FIRST = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Keiko", "Liam",
         "Maya", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wes", "Yara", "Zoe"]
LAST = ["Abbott", "Brandt", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia", "Hansen", "Ibrahim", "Jensen",
        "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Quist", "Rossi", "Silva", "Tanaka"]
STREETS = ["Oak", "Maple", "Cedar", "Birch", "Elm", "Willow", "Aspen", "Juniper", "Hazel", "Linden"]
KINDS = ["Street", "Avenue", "Road", "Lane"]
CITIES = ["Springfield", "Riverton", "Lakeside", "Fairview", "Greenville", "Hillcrest", "Brookfield", "Ashford"]
COLORS = ["red", "blue", "green", "black", "white", "grey"]
SIZES = ["small", "medium", "large"]
REASONS = ["no longer needed", "ordered by mistake"]
# product name → option names; every product has all combinations of its options
CATALOGUE: dict[str, dict[str, list[str]]] = {
    "t-shirt": {"color": COLORS[:4], "size": SIZES},
    "hoodie": {"color": COLORS[2:], "size": SIZES},
    "mug": {"color": COLORS[3:]},
    "backpack": {"color": COLORS[:3], "size": ["small", "large"]},
    "water bottle": {"color": COLORS[1:5]},
    "cap": {"color": COLORS, "size": ["medium", "large"]},
}
BASE_PRICE = {"t-shirt": 18, "hoodie": 45, "mug": 12, "backpack": 60, "water bottle": 20, "cap": 15}


def _address(rng: random.Random) -> str:
    return f"{rng.randint(2, 98)} {rng.choice(STREETS)} {rng.choice(KINDS)}, {rng.choice(CITIES)}"


def _products(rng: random.Random) -> dict[str, Any]:
    products = {}
    for n, (name, options) in enumerate(sorted(CATALOGUE.items())):
        pid = f"P{100 + n}"
        combos: list[dict[str, str]] = [{}]
        for option, values in options.items():
            combos = [{**c, option: v} for c in combos for v in values]
        variants = []
        for m, combo in enumerate(combos):
            variants.append({"item_id": f"I{100 + n}{m:02d}", "options": combo,
                             "price": BASE_PRICE[name] + rng.randint(0, 6), "available": rng.random() > 0.1})
        products[pid] = {"product_id": pid, "name": name, "variants": variants}
    return products


def generate(seed: int) -> State:
    """A small world: 3 customers, the catalogue, and 2-3 orders each; a new
    copy at every call (sessions change it)."""
    return pickle.loads(_generated(seed))


@lru_cache(maxsize=4096)
def _generated(seed: int) -> bytes:
    # Every episode and every grade starts from its task's world: it is built
    # once per seed and copied by unpickling, about 5x faster than building it.
    return pickle.dumps(_build(seed), protocol=pickle.HIGHEST_PROTOCOL)


def _build(seed: int) -> State:
    rng = random.Random(seed)
    products = _products(rng)
    customers: dict[str, Any] = {}
    orders: dict[str, Any] = {}
    names = rng.sample([(f, last) for f in FIRST for last in LAST], 3)
    for first, last in names:
        cid = f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}"
        methods: list[dict[str, Any]] = [{"id": f"card_{rng.randint(100000, 999999)}", "kind": "card"},
                   {"id": f"gift_card_{rng.randint(100000, 999999)}", "kind": "gift_card",
                    "balance": rng.randint(0, 150)}]
        if rng.random() < 0.5:
            methods.append({"id": f"paypal_{rng.randint(100000, 999999)}", "kind": "paypal"})
        customers[cid] = {"customer_id": cid, "first_name": first, "last_name": last,
                          "email": f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.com",
                          "zip": f"{rng.randint(10000, 99999)}", "address": _address(rng),
                          "payment_methods": methods, "orders": []}
        statuses = ["pending", "delivered", rng.choice(["processed", "delivered", "pending", "cancelled"])]
        for status in statuses:
            oid = f"#W{rng.randint(1000000, 9999999)}"
            items: list[dict[str, Any]] = []
            for pid in rng.sample(sorted(products), rng.randint(1, 3)):
                variant = rng.choice(products[pid]["variants"])
                items.append({"item_id": variant["item_id"], "product_id": pid, "name": products[pid]["name"],
                              "options": dict(variant["options"]), "price": variant["price"]})
            orders[oid] = {"order_id": oid, "customer_id": cid, "status": status, "items": items,
                           "address": customers[cid]["address"],
                           "payment_method_id": rng.choice(methods[:1] + methods[2:])["id"],
                           "cancel_reason": None, "returns": [], "exchanges": []}
            customers[cid]["orders"].append(oid)
    return {"customers": customers, "products": products, "orders": orders, "transfers": []}


def state_hash(state: State) -> str:
    """SHA-256 of the canonical JSON dump of the state."""
    return hashlib.sha256(json.dumps(state, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

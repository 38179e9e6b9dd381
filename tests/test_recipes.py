from __future__ import annotations

import pytest

from brewkb.errors import RecipeError
from brewkb.recipes import (
    Recipe,
    build_body,
    is_slug,
    parse_recipe,
    render_recipe,
    slugify,
    split_sections,
    validate,
)

HAND_WRITTEN = [
    # key order unusual, a date, a comment, flow list, unicode, no final newline
    "---\ndescription: Refund a returned item  # the usual case\nname: refund-item\n"
    "created: 2024-05-01\ntags: [billing, 'refunds']\n---\n\n## When to use\nCafé orders.\n",
    "---\nname: export-pdf\ndescription: >\n  Export a document\n  as PDF.\n---\n## How to perform\n\n"
    "1. `export(doc)`\n2. Save.\n\n## Pitfalls\n- none",
    "---\nname: a\ndescription: \"quoted: value\"\nsources:\n  - t1\n  - t2\nowner: ops\n---\n\nbody\r\n",
]


@pytest.mark.parametrize("text", HAND_WRITTEN)
def test_unchanged_recipe_renders_byte_for_byte(text: str) -> None:
    assert render_recipe(parse_recipe(text)) == text


def test_changed_recipe_keeps_key_order_dates_and_unknown_keys() -> None:
    recipe = parse_recipe(HAND_WRITTEN[0])
    text = render_recipe(recipe.replace(description="Refund a returned item."))
    keys = [line.split(":")[0] for line in text.split("---")[1].strip().splitlines()]
    assert keys[:3] == ["description", "name", "created"]
    assert "created: 2024-05-01\n" in text  # still the written string, unquoted
    assert parse_recipe(text).extra == (("created", "2024-05-01"),)
    assert text.endswith("Café orders.\n")


def test_new_recipe_renders_and_parses_back() -> None:
    body = build_body([("When to use", "Always."), ("Pitfalls", ""), ("How to perform", "1. go")])
    recipe = Recipe(name="x", description="d", concept="X thing", sources=("t1",), body=body)
    back = parse_recipe(render_recipe(recipe))
    assert back == recipe
    assert [h for h, _ in split_sections(back.body)] == ["When to use", "How to perform"]
    assert back.section("how to PERFORM") == "1. go"


@pytest.mark.parametrize(
    ("title", "slug"),
    [
        ("../../etc/passwd", "etc-passwd"),
        ("Export as PDF!", "export-as-pdf"),
        ("Crème brûlée -- recipe", "creme-brulee-recipe"),
        ("", "recipe"),
        ("!!!", "recipe"),
        ("a" * 70, "a" * 64),
        ("word " * 20, ("word-" * 12).rstrip("-")),
    ],
)
def test_slugify_is_always_a_valid_name(title: str, slug: str) -> None:
    assert slugify(title) == slug
    assert is_slug(slug)


@pytest.mark.parametrize("name", ["Export", "a--b", "-a", "a/b", "../x", "a" * 65, "a_b"])
def test_bad_slugs_are_rejected(name: str) -> None:
    assert not is_slug(name)


@pytest.mark.parametrize(
    ("text", "fragment", "line"),
    [
        ("\ufeff---\nname: a\n---\nx\n", "byte-order mark", 1),
        ("name: a\n", "no front matter", 1),
        ("---\nname: a\ndescription: b\n", "not closed", 1),
        ("---\nname: a\ndescription: [b\n---\nx\n", "not valid YAML", 3),  # where the unclosed `[` is
        ("---\nname: a\ndescription: \"b\n---\nx\n", "not valid YAML", 3),
        ("---\nname: a\ndescription: &d b\ntags: [*d]\n---\nx\n", "an anchor", 3),
        ("---\n- a\n---\nx\n", "mapping", 2),
        ("---\nname: a\ntags: 3\n---\nx\n", "list of strings", None),
    ],
)
def test_parse_errors_say_what_and_where(text: str, fragment: str, line: int | None) -> None:
    with pytest.raises(RecipeError, match=fragment) as info:
        parse_recipe(text)
    assert info.value.line == line


def test_validate_reports_each_problem_with_its_key() -> None:
    recipe = parse_recipe("---\nname: Bad Name\ndescription: " + "x" * 1025 + "\nfoo: 1\n---\n\n")
    found = {(i.severity, i.key) for i in validate(recipe, stem="other")}
    assert found == {("error", "name"), ("error", "description"), ("warning", "foo"), ("error", None)}

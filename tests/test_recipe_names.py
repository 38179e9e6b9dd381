"""A recipe whose name is not a slug equal to its file stem is skipped, with a
warning, by every reader of a KB; export never writes outside its folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from brewkb.errors import BrewError
from brewkb.kb import KB
from brewkb.retrieval.ranking import open_index, retrieve
from tests.conftest import MakeRepo


def recipe(name: str, text: str) -> str:
    return f"---\nname: {json.dumps(name)}\ndescription: {text}\n---\n\n## How to perform\n\n{text}\n"


FILES = {
    "brewkb.toml": "",
    "recipes/good.md": recipe("good", "Refund a cancelled order with the refund tool."),
    "recipes/escape.md": recipe("../../x", "Refund a cancelled order and escape the folder."),
    "recipes/other.md": recipe("not-other", "Refund a cancelled order under a different name."),
    "recipes/long.md": recipe("a" * 5000, "Refund a cancelled order with a very long name."),
}


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=root, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def kb_root(make_repo: MakeRepo) -> Path:
    return make_repo(FILES)


def test_badly_named_recipes_are_skipped_with_a_warning(kb_root: Path) -> None:
    out = cli(kb_root, "search", "refund cancelled order", "--json")
    assert out.returncode == 0, out.stderr
    assert [hit["name"] for hit in json.loads(out.stdout)] == ["good"]
    for stem in ("escape.md", "other.md", "long.md"):
        assert f"skipping {kb_root / 'recipes' / stem}" in out.stderr
    assert "'../../x' is not a valid slug" in out.stderr and "differs from the file name 'other'" in out.stderr
    assert "(5000 characters)" in out.stderr and "a" * 200 not in out.stderr  # the long name is shortened
    at_head = cli(kb_root, "search", "refund cancelled order", "--json", "--rev", "HEAD")
    assert [hit["name"] for hit in json.loads(at_head.stdout)] == ["good"]
    assert "skipping recipes/escape.md at " in at_head.stderr


def test_show_and_index_see_only_well_named_recipes(kb_root: Path) -> None:
    shown = cli(kb_root, "show", "not-other")
    assert shown.returncode == 1 and "no recipe named 'not-other'" in shown.stderr
    long = cli(kb_root, "show", "a" * 5000)
    assert long.returncode == 1 and "Traceback" not in long.stderr
    assert long.stderr.count("\n") == 1 and "is not a recipe name" in long.stderr and len(long.stderr) < 400
    indexed = cli(kb_root, "index", "--json")
    assert indexed.returncode == 0, indexed.stderr
    with KB.open(kb_root) as kb:
        assert [r.name for r in kb.recipes()] == ["good"] == [r.name for r in kb.recipes("HEAD")]
        # what the MCP server's search_recipes and get_recipe tools read
        assert [h.name for h in retrieve(open_index(kb, None), "refund cancelled order", 5)] == ["good"]
        with pytest.raises(BrewError, match="no recipe named 'not-other'"):
            kb.recipe("not-other")


def test_export_writes_nothing_outside_its_folder(kb_root: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "deep" / "skills"
    done = cli(kb_root, "export", "skills", str(out_dir))
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(out_dir) for p in out_dir.rglob("*")) == [Path("good"), Path("good/SKILL.md")]
    assert sorted(tmp_path.rglob("SKILL.md")) == [out_dir / "good" / "SKILL.md"]  # '../../x' went nowhere


def test_export_refuses_a_destination_that_a_link_moves_outside(kb_root: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "skills"
    out_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out_dir / "good").symlink_to(elsewhere)
    done = cli(kb_root, "export", "skills", str(out_dir))
    assert done.returncode == 1 and "is outside" in done.stderr
    assert list(elsewhere.iterdir()) == []

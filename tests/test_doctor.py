"""`brewkb doctor` through the real CLI against fake servers that behave like
vLLM, Ollama and llama-cpp-python's server, with the profiles of docs/llm.md."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, MakeRepo
from tests.fakes import servers
from tests.fakes.openai_server import FakeOpenAI

SECRET = "sk-test-SECRET-7731"


def profile(name: str) -> str:
    """The TOML block under ``<!-- profile:NAME -->`` in docs/llm.md."""
    text = (REPO_ROOT / "docs" / "llm.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- profile:{name} -->\n```toml\n(.*?)```", text, flags=re.S)
    assert found, f"docs/llm.md has no profile {name}"
    return found.group(1)


def doctor(repo: Path, toml: str, *args: str, key: str | None = SECRET) -> subprocess.CompletedProcess[str]:
    (repo / "brewkb.toml").write_text(toml)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo), "BREWKB_LOG_DIR": str(repo / ".logs")}
    if key:
        env["OPENAI_API_KEY"] = key
    return subprocess.run([sys.executable, "-m", "brewkb", "doctor", *args], cwd=repo, capture_output=True,
                          text=True, env=env)


def row(stdout: str, role: str) -> list[str]:
    line = next(line for line in stdout.splitlines() if line.startswith(role + " "))
    return line.split()


@pytest.fixture
def repo(make_repo: MakeRepo) -> Path:
    return make_repo({"README.md": "kb\n"})


def test_vllm_profile_passes_every_check_including_tools(repo: Path) -> None:
    with servers.vllm() as chat, servers.vllm("BAAI/bge-small-en-v1.5") as embed:
        toml = profile("vllm").replace("http://localhost:8000/v1", chat.base_url) \
            .replace("http://localhost:8001/v1", embed.base_url) + '\n[agent]\nname = "tool-agent"\n'
        result = doctor(repo, toml, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    roles = {r["role"]: r for r in report["roles"]}
    assert list(roles) == ["agent", "reflector", "integrator", "relabeller", "judge", "embeddings"]
    assert roles["agent"]["checks"]["tools"]["short"] == "yes"
    assert roles["reflector"]["mode"] == "json_schema"
    assert roles["judge"]["checks"]["long_prompt"]["short"] == "whole"
    assert roles["embeddings"]["checks"]["embeddings"]["short"] == "16 dims"
    assert roles["embeddings"]["endpoint"] == embed.base_url
    # roles on one endpoint and model share their probes: one long prompt, one structured request
    assert len([b for _, b in chat.requests if "code word" in json.dumps(b)]) == 1
    assert len([b for _, b in chat.requests if "response_format" in b]) == 1


def test_llamacpp_profile_reports_json_schema_rejected_and_the_fallback(repo: Path) -> None:
    with servers.llamacpp_python() as chat, \
            servers.llamacpp_python("/models/nomic-embed-text-v1.5.Q8_0.gguf") as embed:
        toml = profile("llamacpp").replace("http://localhost:8000/v1", chat.base_url) \
            .replace("http://localhost:8001/v1", embed.base_url)
        result = doctor(repo, toml)
    assert result.returncode == 0, result.stderr
    cells = row(result.stdout, "reflector")
    assert cells[-1] == "json_object" and "no" in cells and "→" in cells
    assert "json_schema rejected (HTTP 422" in result.stdout
    assert SECRET not in result.stdout + result.stderr
    assert row(result.stdout, "reflector")[cells.index("→") - 2] == "set"  # key column says only "set"


def test_ollama_default_context_is_reported_as_truncation(repo: Path) -> None:
    with servers.ollama(context=2048) as fake:
        result = doctor(repo, profile("ollama").replace("http://localhost:11434/v1", fake.base_url),
                        "--long-prompt", "3000", key=None)
    assert result.returncode == 1
    assert "truncated" in row(result.stdout, "reflector")
    assert "arrived as 2048 tokens" in result.stdout and "num_ctx" in result.stdout
    assert result.stderr.startswith("brewkb: error: 4 roles cannot work as configured")
    assert "Traceback" not in result.stderr


def test_ollama_profile_with_a_larger_context_passes(repo: Path) -> None:
    with servers.ollama(context=16384) as fake:
        result = doctor(repo, profile("ollama").replace("http://localhost:11434/v1", fake.base_url),
                        "--long-prompt", "3000", key=None)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = row(result.stdout, "reflector")
    assert "whole" in cells and cells[-1] == "json_schema" and "none" in cells  # no key, a local server


def test_unreachable_endpoint_and_missing_key_fail_in_one_line(repo: Path) -> None:
    with FakeOpenAI() as fake:
        dead = fake.base_url  # closed when the block ends
    result = doctor(repo, f'[llm]\nbackend = "openai"\nbase_url = "{dead}"\n', "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["roles"][0]["checks"]["reachable"]["status"] == "FAIL"
    detail = report["roles"][0]["checks"]["reachable"]["detail"]
    # nothing listens there: the transport's own words, not the SDK's "Request timed out."
    assert "cannot reach" in detail and "Connect call failed" in detail and "timed out" not in detail, detail
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    # no base URL and no key: nothing is called, the key is what is missing
    result = doctor(repo, '[llm]\nbackend = "openai"\n', key=None)
    assert result.returncode == 1 and "missing" in row(result.stdout, "reflector")
    assert "OPENAI_API_KEY is not set" in result.stdout


def test_offline_backend_has_nothing_to_check(repo: Path) -> None:
    result = doctor(repo, '[llm]\nbackend = "offline"\n')
    assert result.returncode == 0 and "no endpoint to check" in result.stdout


def test_llama_server_profile_uses_its_one_model_and_a_separate_embeddings_server(repo: Path) -> None:
    with servers.llama_server() as chat, servers.llama_server("nomic-embed-text-v1.5.Q8_0.gguf",
                                                              embeddings=True) as embed:
        toml = profile("llama-server").replace("http://localhost:8080/v1", chat.base_url) \
            .replace("http://localhost:8081/v1", embed.base_url) + '\n[agent]\nname = "tool-agent"\n'
        result = doctor(repo, toml, "--json", "--long-prompt", "500", key=None)
        assert result.returncode == 0, result.stdout + result.stderr
        roles = {r["role"]: r for r in json.loads(result.stdout)["roles"]}
        assert roles["agent"]["model"] == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
        assert roles["agent"]["checks"]["model"]["short"] == "served"
        assert roles["agent"]["checks"]["tools"]["short"] == "yes"
        assert roles["embeddings"]["model"] == "nomic-embed-text-v1.5.Q8_0.gguf"
        assert roles["embeddings"]["checks"]["embeddings"]["short"] == "16 dims"
    # without --jinja the calls come as text: brewkb reads them, the doctor says so
    with servers.llama_server(jinja=False) as chat:
        result = doctor(repo, f'[llm]\nbackend = "openai"\nbase_url = "{chat.base_url}"\n[agent]\nname = "tool-agent"\n',
                        "--long-prompt", "500", key=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " from text " in next(line for line in result.stdout.splitlines() if line.startswith("agent "))
    assert "llama-server --jinja" in result.stdout
    assert "offline" in row(result.stdout, "embeddings")  # the chat server serves none: the offline embedder
    assert "has no embeddings endpoint (HTTP 501" in result.stdout

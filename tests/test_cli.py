from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import brewkb
import brewkb.api
from brewkb.cli import main as cli_main
from tests.conftest import MakeRepo, git, recipe_text


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=cwd, capture_output=True, text=True)


def test_version_and_help_stay_light(tmp_path: Path) -> None:
    assert run(tmp_path, "--version").stdout.strip() == f"brewkb, version {brewkb.__version__}"
    code = ("import sys; from brewkb.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('openai', 'tantivy', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_lint_and_search_never_import_the_llm_sdk(make_repo: MakeRepo) -> None:
    repo = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice")})
    code = ("import sys; from brewkb.cli.main import main\n"
            "for argv in (['lint'], ['search', 'invoice', '--json']):\n"
            "    try:\n        main(argv)\n    except SystemExit as exc:\n        assert exc.code == 0, exc.code\n"
            "print('openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
    assert '"name": "pay"' in out.stdout


def test_init_creates_a_kb_and_refuses_to_overwrite(tmp_path: Path) -> None:
    result = run(tmp_path, "init", "kb", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["git_initialised"] is True
    kb = tmp_path / "kb"
    assert (kb / ".git").is_dir() and (kb / "recipes").is_dir() and (kb / "runs").is_dir()
    assert ".brewkb/" in (kb / ".gitignore").read_text().splitlines()
    config = (kb / "brewkb.toml").read_text()
    (kb / "brewkb.toml").write_text(config + "\n# mine\n")
    again = run(tmp_path, "init", "kb")
    assert again.returncode == 0
    assert again.stdout.startswith(f"{kb} is a brewkb knowledge base already; nothing changed")
    assert (kb / "brewkb.toml").read_text().endswith("# mine\n")
    assert run(tmp_path, "init", "kb", "--force").returncode == 0
    assert (kb / "brewkb.toml").read_text() == config
    assert (kb / ".gitignore").read_text().count(".brewkb/") == 1


def test_init_in_an_existing_repo_keeps_its_gitignore(make_repo: MakeRepo) -> None:
    repo = make_repo({".gitignore": "*.pyc\n", "a.txt": "a\n"})
    assert run(repo, "init").returncode == 0
    assert (repo / ".gitignore").read_text().startswith("*.pyc\n\n# brewkb")
    sub = repo / "sub"
    sub.mkdir()
    result = run(repo, "init", "sub")
    assert result.returncode == 1 and "lives at the repository root" in result.stderr
    assert not (sub / "brewkb.toml").exists()


def test_show_reads_the_working_tree_or_a_revision(make_repo: MakeRepo) -> None:
    repo = make_repo({"recipes/pay.md": recipe_text("pay", "Pay an invoice")})
    (repo / "recipes" / "pay.md").write_text(recipe_text("pay", "Pay an invoice, edited"))
    assert "Pay an invoice, edited" in run(repo, "show", "pay").stdout
    assert run(repo, "show", "pay", "--rev", "HEAD").stdout == recipe_text("pay", "Pay an invoice")
    data = json.loads(run(repo, "show", "pay", "--json").stdout)
    assert data["name"] == "pay" and "1. Do it." in data["body"]
    missing = run(repo, "show", "pya")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "brewkb: error: no recipe named 'pya' in the working tree; did you mean pay?"
    bad_rev = run(repo, "show", "pay", "--rev", "nope")
    assert bad_rev.returncode == 1 and "unknown revision 'nope'" in bad_rev.stderr


def test_known_errors_are_one_line(tmp_path: Path) -> None:
    result = run(tmp_path, "show", "x")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "not inside a git repository" in result.stderr


def test_bare_repo_and_detached_head(tmp_path: Path, make_repo: MakeRepo) -> None:
    source = make_repo({"recipes/a.md": recipe_text("a")}, name="src")
    bare = tmp_path / "kb.git"
    git(tmp_path, "clone", "-q", "--bare", str(source), str(bare))
    assert run(bare, "show", "a", "--rev", "HEAD").stdout == recipe_text("a")
    result = run(bare, "show", "a")
    assert result.returncode == 1 and "bare repository" in result.stderr
    git(source, "checkout", "-q", "--detach")
    assert run(source, "show", "a").returncode == 0


def test_bad_config_is_reported_with_its_key(make_repo: MakeRepo) -> None:
    repo = make_repo({"brewkb.toml": "[retrieval]\nk = 'three'\n", "recipes/a.md": recipe_text("a")})
    result = run(repo, "show", "a")
    assert result.returncode == 1
    assert "retrieval.k: expected an integer ≥ 1, got 'three'" in result.stderr


def test_a_bug_exits_3_with_a_traceback_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(brewkb.api, "lint", boom)
    with pytest.raises(SystemExit) as info:
        cli_main.main(["lint", str(tmp_path)])
    assert info.value.code == 3
    err = capsys.readouterr().err
    assert "this is a bug" in err
    log = Path(err.split("traceback is in ")[1].split(" — ")[0])
    assert "ZeroDivisionError: boom" in log.read_text()


def test_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(brewkb.api, "lint", interrupted)
    with pytest.raises(SystemExit) as info:
        cli_main.main(["lint", str(tmp_path)])
    assert info.value.code == 130


def test_public_api_is_curated() -> None:
    assert sorted(brewkb.__all__) == sorted(set(brewkb.__all__))
    for name in brewkb.__all__:
        assert getattr(brewkb, name) is not None
    public = {n for n in dir(brewkb) if not n.startswith("_") and not isinstance(getattr(brewkb, n), type(sys))}
    assert public <= set(brewkb.__all__) | {"annotations"}

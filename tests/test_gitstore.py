from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from brewkb.errors import GitError, MergeConflictError, NotARepoError, RefConflictError
from brewkb.git.refs import NOTES_REF, BrewRef
from brewkb.git.store import GitStore, format_message, parse_trailers
from tests.conftest import MakeRepo, git, recipe_text

T0 = 1_700_000_000


@pytest.fixture
def repo(make_repo: MakeRepo) -> Path:
    return make_repo({
        "README.md": "kb\n",
        "recipes/a.md": recipe_text("a"),
        "recipes/b.md": recipe_text("b"),
        "recipes/c.md": recipe_text("c"),
        "recipes/nested/keep.txt": "x\n",
    })


def node(store: GitStore, base: str, path: str, text: str, run: str = "r1", n: int = 1) -> str:
    tree = store.replace_file(store.commit_tree(base), path, text.encode())
    concept = Path(path).stem
    message = format_message(f"brew: {concept} n{n}", trailers={"Brew-Run": run, "Brew-Concept": concept,
                                                                 "Brew-Node": str(n)})
    commit = store.write_commit(tree, [base], message, timestamp=T0)
    store.update_ref(str(BrewRef.for_node(run, concept, n)), commit, expected=None)
    return commit


def test_node_commit_changes_one_file_and_leaves_worktree_alone(repo: Path) -> None:
    index_before = (repo / ".git" / "index").stat().st_mtime_ns
    store = GitStore(repo)
    base = store.head_commit()
    commit = node(store, base, "recipes/b.md", recipe_text("b", "new description"))
    assert git(repo, "diff", "--name-only", base, commit).split() == ["recipes/b.md"]
    assert git(repo, "show", f"{commit}:recipes/b.md") == recipe_text("b", "new description")
    assert git(repo, "rev-parse", "brew/r1/b/n1").strip() == commit
    assert (repo / ".git" / "index").stat().st_mtime_ns == index_before  # before git status refreshes it
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / "recipes" / "b.md").read_text() == recipe_text("b")
    trailers = parse_trailers(git(repo, "log", "-1", "--format=%B", commit))
    assert trailers == {"Brew-Run": "r1", "Brew-Concept": "b", "Brew-Node": "1"}
    assert git(repo, "log", "-1", "--format=%at", commit).strip() == str(T0)
    git(repo, "fsck", "--strict")


def test_identical_content_gives_identical_commit_ids(repo: Path) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    tree = store.replace_file(store.commit_tree(base), "recipes/a.md", b"same\n")
    one = store.write_commit(tree, [base], "m\n", timestamp=T0)
    two = store.write_commit(tree, [base], "m\n", timestamp=T0)
    assert one == two


def test_read_folder_at_a_revision(repo: Path) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    commit = node(store, base, "recipes/a.md", "changed\n")
    files = store.read_folder(commit, "recipes")
    assert sorted(files) == ["recipes/a.md", "recipes/b.md", "recipes/c.md"]
    assert files["recipes/a.md"] == b"changed\n"
    assert store.read_folder(base, "recipes")["recipes/a.md"] == recipe_text("a").encode()
    assert store.read_folder(base, "missing") == {}


def test_notes_batch_is_one_commit_and_reads_back(repo: Path) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    commits = [node(store, base, f"recipes/{c}.md", f"{c} v1\n") for c in "abc"]
    notes = {c: {"reward": i / 2, "r_corr": 1.0, "tasks": ["t1"]} for i, c in enumerate(commits)}
    notes_commit = store.add_notes(notes, "brew: rewards\n", timestamp=T0)
    assert git(repo, "rev-list", "--count", NOTES_REF).strip() == "1"
    assert git(repo, "rev-parse", NOTES_REF).strip() == notes_commit
    assert store.read_notes() == notes
    assert GitStore(repo).read_note(commits[1]) == notes[commits[1]]
    # git itself reads them
    assert '"reward": 0.5' in git(repo, "notes", "--ref=brew", "show", commits[1])
    assert '"reward": 1.0' in git(repo, "log", "--notes=brew", "-1", commits[2])
    with pytest.raises(GitError, match="written once"):
        store.add_notes({commits[0]: {"reward": 9}}, "again\n", timestamp=T0)
    assert store.read_notes() == notes
    git(repo, "fsck", "--strict")


def test_notes_written_by_git_are_read_too(repo: Path) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    git(repo, "notes", "--ref=brew", "add", "-m", '{"reward": 0.25}', base)
    other = node(store, base, "recipes/a.md", "x\n")
    store.add_notes({other: {"reward": 1}}, "n\n", timestamp=T0)
    assert store.read_notes() == {base: {"reward": 0.25}, other: {"reward": 1}}
    assert '"reward": 1' in git(repo, "notes", "--ref=brew", "show", other)


@pytest.mark.parametrize("n", [1, 3])
def test_merge_of_n_tips(repo: Path, n: int) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    base_tree = store.commit_tree(base)
    tips = [node(store, base, f"recipes/{c}.md", f"{c} best\n") for c in "abc"[:n]]
    merged = store.merge_tree(base_tree, tips)
    merge = store.write_commit(merged, [base, *tips], "gather\n", timestamp=T0)
    assert len(git(repo, "log", "-1", "--format=%P", merge).split()) == n + 1
    expected = {f"recipes/{c}.md": f"{c} best\n" for c in "abc"[:n]}
    for path, text in expected.items():
        assert git(repo, "show", f"{merge}:{path}") == text
    assert sorted(git(repo, "diff", "--name-only", base, merge).split()) == sorted(expected)
    assert git(repo, "show", f"{merge}:recipes/nested/keep.txt") == "x\n"
    git(repo, "fsck", "--strict")


def test_merge_conflict_is_detected(repo: Path) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    one = node(store, base, "recipes/a.md", "one\n", n=1)
    two = node(store, base, "recipes/a.md", "two\n", n=2)
    with pytest.raises(MergeConflictError, match="recipes/a.md is changed by both"):
        store.merge_tree(store.commit_tree(base), [one, two])
    same = node(store, base, "recipes/a.md", "one\n", n=3)
    assert store.merge_tree(store.commit_tree(base), [one, same]) == store.commit_tree(one)


def test_compare_and_swap_refuses_a_moved_ref(repo: Path) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    ref = str(BrewRef.kb("r1"))
    store.update_ref(ref, base, expected=None)
    with pytest.raises(RefConflictError, match="moved"):
        store.update_ref(ref, base, expected=None)
    other = node(store, base, "recipes/a.md", "x\n")
    with pytest.raises(RefConflictError):
        store.update_ref(ref, other, expected=other)
    assert store.read_ref(ref) == base
    store.update_ref(ref, other, expected=base)
    assert git(repo, "rev-parse", "brew/r1/kb").strip() == other
    # a lock held by someone else is respected
    lock = repo / ".git" / (ref + ".lock")
    lock.write_text("")
    with pytest.raises(RefConflictError, match="locked"):
        store.update_ref(ref, base, expected=other)
    lock.unlink()


def test_cas_reads_packed_refs(repo: Path) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    git(repo, "branch", "brew/r1/kb", base)
    git(repo, "pack-refs", "--all")
    assert store.read_ref("refs/heads/brew/r1/kb") == base
    with pytest.raises(RefConflictError):
        store.update_ref("refs/heads/brew/r1/kb", base, expected=None)


def test_list_and_delete_by_prefix(repo: Path) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    for n in range(3):
        node(store, base, "recipes/a.md", f"{n}\n", n=n)
    node(store, base, "recipes/a.md", "other run\n", run="r2")
    store.update_ref(str(BrewRef.kb("r1")), base, expected=None)
    git(repo, "pack-refs", "--all")
    nodes = {r: s for r, s in store.list_refs("refs/heads/brew/r1/").items() if BrewRef.parse(r).kind == "node"}
    assert len(nodes) == 3
    assert store.delete_refs(nodes) == 3
    assert list(store.list_refs("refs/heads/brew/r1/")) == ["refs/heads/brew/r1/kb"]
    assert len(store.list_refs("refs/heads/brew/r2/")) == 1


def _bump(root: str, who: int, rounds: int) -> None:
    store = GitStore(root)
    ref = "refs/heads/brew/race/kb"
    for i in range(rounds):
        while True:
            head = store.read_ref(ref)
            tree = store.replace_file(store.commit_tree(head), f"recipes/w{who}.md", f"{i}\n".encode())
            commit = store.write_commit(tree, [head], f"{who}-{i}\n", timestamp=T0 + i)
            try:
                store.update_ref(ref, commit, expected=head)
                break
            except RefConflictError:
                continue
        store.add_notes({commit: {"who": who, "i": i}}, "n\n", timestamp=T0)


def test_two_processes_never_lose_an_update(repo: Path) -> None:
    store = GitStore(repo)
    store.update_ref("refs/heads/brew/race/kb", store.head_commit(), expected=None)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_bump, args=(str(repo), w, 15)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert git(repo, "rev-list", "--count", "brew/race/kb").strip() == str(1 + 30)
    assert len(GitStore(repo).read_notes()) == 30
    git(repo, "fsck", "--strict")


def test_not_a_repo_and_bare_repo(tmp_path: Path, make_repo: MakeRepo) -> None:
    with pytest.raises(NotARepoError, match="not inside a git repository; run `brewkb init`"):
        GitStore(tmp_path)
    source = make_repo({"recipes/a.md": recipe_text("a")}, name="src")
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(source), str(bare))
    store = GitStore(bare)
    assert store.is_bare
    assert list(store.read_folder(store.head_commit(), "recipes")) == ["recipes/a.md"]
    with pytest.raises(GitError, match="bare repository"):
        store.require_work_tree()


def test_unborn_head_and_detached_head(make_repo: MakeRepo) -> None:
    empty = make_repo(commit=False)
    with pytest.raises(GitError, match="no commits yet"):
        GitStore(empty).head_commit()
    repo = make_repo({"a.txt": "a\n"})
    git(repo, "checkout", "-q", "--detach")
    store = GitStore(repo)
    with pytest.raises(GitError, match="HEAD is detached"):
        store.head_branch()
    assert store.resolve("HEAD") == store.head_commit()


def test_unknown_revision_and_paths_outside(repo: Path, tmp_path: Path) -> None:
    store = GitStore(repo)
    with pytest.raises(GitError, match="unknown revision 'nope'"):
        store.resolve("nope")
    with pytest.raises(GitError, match="outside the repository"):
        store.relpath(tmp_path)
    assert store.relpath(repo / "recipes") == "recipes"
    assert os.path.isdir(repo / "recipes")


def test_objects_written_in_a_batch_land_in_one_pack_that_git_reads(repo: Path) -> None:
    store = GitStore(repo)
    base = store.head_commit()
    packs = repo / ".git" / "objects" / "pack"
    loose_before = set((repo / ".git" / "objects").glob("??/*"))
    with store.packed():
        trees = [store.replace_file(store.commit_tree(base), f"recipes/x{i}.md", b"v" * (i * 300)) for i in range(40)]
        commits = [store.write_commit(tree, [base], f"n{i}\n", timestamp=T0) for i, tree in enumerate(trees)]
        assert not list(packs.glob("*.pack"))  # nothing on disk yet; reads see the objects all the same
        entry = store.lookup(store.commit_tree(commits[39]), "recipes/x39.md")
        assert entry is not None and store.read_blob(entry.sha) == b"v" * 39 * 300
        store.update_ref("refs/heads/brew/r1/x/n1", commits[1], expected=None)
        # the ref moved inside the batch names objects already on disk
        assert git(repo, "cat-file", "-t", "brew/r1/x/n1").strip() == "commit"
        late = [store.write_blob(b"written after the ref %d\n" % i) for i in range(40)]
    assert git(repo, "cat-file", "-p", late[7]) == "written after the ref 7\n"
    assert set((repo / ".git" / "objects").glob("??/*")) == loose_before
    assert len(list(packs.glob("*.pack"))) == len(list(packs.glob("*.idx"))) == 2
    assert git(repo, "show", f"{commits[39]}:recipes/x39.md") == "v" * 39 * 300
    git(repo, "fsck", "--strict", "--full")
    # a handful of objects stays loose rather than piling up small packs
    with store.packed():
        small = store.write_blob(b"one small object\n")
    assert (repo / ".git" / "objects" / small[:2] / small[2:]).is_file()


def test_a_search_writes_its_nodes_branches_once_their_objects_are_on_disk(repo: Path) -> None:
    from brewkb.search.store import SearchStore

    git_store = GitStore(repo)
    store = SearchStore(git_store, "r2", git_store.head_commit(), "recipes")
    with pytest.raises(RuntimeError), store.writing():
        first, _ = store.write_node("a", 1, None, store.base, 1, 0, recipe_text("a", "first"), ())
        assert git_store.read_ref("refs/heads/brew/r2/a/n1") is None  # not before the batch is on disk
        raise RuntimeError("the block fails after one node")
    assert git(repo, "rev-parse", "brew/r2/a/n1").strip() == first  # a node written is kept
    with store.writing():
        store.write_node("a", 1, None, store.base, 1, 0, recipe_text("a", "first"), ())  # the same node: no-op
        store.write_node("b", 2, None, store.base, 1, 0, recipe_text("b", "other"), ())
    with pytest.raises(GitError, match="exists with other content"), store.writing():
        store.write_node("b", 2, None, store.base, 1, 0, recipe_text("b", "changed"), ())
    git(repo, "fsck", "--strict")


def test_objects_that_cannot_be_written_get_no_branch(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from brewkb.git import objects
    from brewkb.search.store import SearchStore

    def full_disk(*args: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(objects, "write_pack", full_disk)
    git_store = GitStore(repo)
    store = SearchStore(git_store, "r3", git_store.head_commit(), "recipes")
    with pytest.raises(OSError, match="No space left"), store.writing():  # the command names the folder
        for n in range(12):  # enough objects for a pack
            store.write_node(f"c{n}", n, None, store.base, 1, 0, recipe_text(f"c{n}", f"version {n}"), ())
    assert git(repo, "for-each-ref", "refs/heads/brew/r3/") == ""  # no branch names a missing object
    monkeypatch.undo()
    git_store.update_ref("refs/heads/brew/r3/later", git_store.head_commit(), expected=None)  # writes them first
    git(repo, "fsck", "--strict")

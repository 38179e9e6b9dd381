from __future__ import annotations

import gc
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from brewkb.api.stages import concepts, integrate, list_runs, reflect, rollout
from brewkb.api.trajectories import import_trajectories
from brewkb.errors import RunError, TrajectoryError
from brewkb.events import Event
from brewkb.lint import lint_paths
from brewkb.llm.roles import Insight
from brewkb.run.pipeline import Pipeline
from brewkb.stages.concepts import agglomerate, build_concepts, concept_slugs
from brewkb.stages.grading import parse_rubrics
from brewkb.stages.reflect import clean_concept
from brewkb.trajectories.schema import read_jsonl
from tests.conftest import AIRLINE, MakeRepo
from tests.fakes.openai_server import FakeOpenAI

SMALL = '[env]\nname = "shop"\noptions = { train = 16, eval = 8, test = 8 }\n'


def kb(make_repo: MakeRepo, extra: str = "", name: str | None = None) -> Path:
    return make_repo({"brewkb.toml": SMALL + extra, "recipes/.gitkeep": ""}, name=name)


def full(root: Path, run: str = "r") -> list[Any]:
    rollout(run=run, start=root)
    reflect(run, start=root)
    concepts(run, start=root)
    recipes, _ = integrate(run, write=True, start=root)
    return recipes


def outputs(root: Path, run: str = "r") -> dict[str, str]:
    folder = root / "runs" / run
    names = ["rollouts.jsonl", "rollouts-eval.jsonl", "grades.jsonl", "relabelled.jsonl", "reflections.jsonl",
             "concepts.json", "integrated.jsonl"]
    out = {}
    for name in names:
        text = (folder / name).read_text()
        if name.endswith("jsonl") and "rollouts" in name or name == "relabelled.jsonl":
            text = "\n".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "meta"})
                             for line in text.splitlines())  # meta holds wall-clock timings
        out[name] = text
    return out


def test_offline_pipeline_makes_recipes_that_lint_clean(make_repo: MakeRepo) -> None:
    root = kb(make_repo)
    recipes = full(root)
    assert len(recipes) >= 3
    assert lint_paths([root / "recipes"]) == []
    ids = {t.id for t in read_jsonl(root / "runs" / "r" / "rollouts.jsonl")}
    ids |= {t.id for t in read_jsonl(root / "runs" / "r" / "relabelled.jsonl")}
    for recipe in recipes:
        assert recipe.sources and set(recipe.sources) <= ids
    manifest = json.loads((root / "runs" / "r" / "manifest.json").read_text())
    assert set(manifest["stages"]) == {"rollouts", "rollouts-eval", "grades", "relabel", "reflections", "concepts",
                                       "integrate"}
    assert 0.4 <= manifest["stages"]["reflections"]["concepts_per_trajectory"] <= 2
    assert (root / "runs" / "r" / "config.toml").read_text() == (root / "brewkb.toml").read_text()
    assert [r.id for r in list_runs(start=root)] == ["r"] and list_runs(start=root)[0].next_stage is None
    # a second run of the same commands changes nothing and re-runs nothing
    before = outputs(root)
    events: list[Event] = []
    rollout(run="r", start=root, events=events.append)
    assert {e.kind for e in events} == {"stage_skipped"}
    assert outputs(root) == before


class Crash(KeyboardInterrupt):  # like ^C: the event loop stops at once
    pass


@pytest.mark.parametrize("stage", ["rollouts", "rollouts-eval", "grades", "relabel-tasks", "reflections",
                                   "integrate"])
def test_a_killed_stage_resumes_without_redoing_or_duplicating(make_repo: MakeRepo, stage: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    reference = kb(make_repo, name="reference")
    full(reference)
    root = kb(make_repo, name="crashed")
    original = Pipeline._record
    count = {"n": 0}

    def crashing(self: Pipeline, name: str, key: str, value: Any) -> None:
        original(self, name, key, value)
        if name == stage:
            count["n"] += 1
            if count["n"] == 2:
                raise Crash

    monkeypatch.setattr(Pipeline, "_record", crashing)
    # an interrupt raised inside a task leaves it with an exception asyncio reports
    # when the task is collected; collect it now, quietly, instead of at exit
    monkeypatch.setattr(logging.getLogger("asyncio"), "disabled", True)
    with pytest.raises(Crash):
        full(root)
    gc.collect()
    monkeypatch.setattr(Pipeline, "_record", original)
    assert len((root / "runs" / "r" / f"{stage}.partial.jsonl").read_text().splitlines()) == 2
    events: list[Event] = []
    rollout(run="r", start=root, events=events.append)
    reflect("r", start=root, events=events.append)
    concepts("r", start=root)
    integrate("r", write=True, start=root, events=events.append)
    resumed = [e for e in events if e.kind == "stage_started" and e.stage == stage]
    assert resumed and resumed[0].done == 2  # the finished items were not run again
    assert outputs(root) == outputs(reference)
    assert not list((root / "runs" / "r").glob("*.partial.jsonl"))


SLOW_AGENT = """
import json, sys, time
req = json.load(sys.stdin)
time.sleep(0.15)
print(json.dumps({"messages": [{"role": "user", "content": req["task"]}, {"role": "assistant", "content": "ok"}]}))
"""


def test_sigkill_during_rollouts_then_rerun(make_repo: MakeRepo, tmp_path: Path) -> None:
    agent = tmp_path / "slow.py"
    agent.write_text(SLOW_AGENT)
    extra = f'[agent]\nname = "command"\ncommand = ["{sys.executable}", "{agent}"]\n'
    root = kb(make_repo, extra)
    cmd = [sys.executable, "-m", "brewkb", "rollout", "--run", "k", "--split", "train"]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    partial = root / "runs" / "k" / "rollouts.partial.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not partial.exists() or len(partial.read_text().splitlines()) < 3):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(partial.read_text().splitlines())
    assert 3 <= done_before < 16
    out = subprocess.run(cmd + ["--json"], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    started = next(json.loads(line) for line in out.stdout.splitlines() if '"stage_started"' in line)
    assert started["done"] >= done_before
    final = list(read_jsonl(root / "runs" / "k" / "rollouts.jsonl"))
    assert len(final) == 16 and len({t.task_id for t in final}) == 16


def _llm_reply(body: dict[str, Any]) -> dict[str, Any]:
    schema = body["response_format"]["json_schema"]["name"]
    user = body["messages"][-1]["content"]
    if schema == "reflection":
        concept = "Cancel an order" if "cancel" in user.lower() else "Answer the customer"
        if "status" in user.lower():
            concept = "   "  # a nonsense concept name: rejected, counted
        return {"content": json.dumps({"insights": [{"concept": concept, "insight": "Identify first.",
                                                     "steps": ["find_customer_by_email(email)"]}]})}
    if schema == "judge":
        ids = [line[2:].split(":")[0] for line in user.splitlines() if line.startswith("- ")]
        if "exchange" in user.lower():
            return {"content": "nonsense"}  # fails twice: a failed item
        return {"content": json.dumps({"scores": [{"id": i, "score": 0.5, "note": "ok"} for i in ids]})}
    if schema == "relabel":
        return {"content": json.dumps({"summary": "did things", "task": "Please do what was done."})}
    return {"content": json.dumps({"description": "Cancel a pending order on request.", "when_to_use": "Cancel.",
                                   "how_to_perform": "1. `find_customer_by_email(email)`",
                                   "pitfalls": "- none", "example": "Cancel #W1"})}


def test_stages_with_the_llm_backend_against_the_fake_server(make_repo: MakeRepo) -> None:
    with FakeOpenAI(default=_llm_reply) as fake:
        extra = (f'[llm]\nbackend = "openai"\nbase_url = "{fake.base_url}"\n'
                 '[stages]\nmin_concept_insights = 1\naccept_failed = true\n')
        root = kb(make_repo, extra)
        rollout(run="r", start=root)
        summary = reflect("r", start=root)
        found = concepts("r", start=root)
        recipes, _ = integrate("r", start=root)
        paths = {p for p, _ in fake.requests}
        first_reflection = next(b for p, b in fake.requests if b.get("response_format", {}).get(
            "json_schema", {}).get("name") == "reflection")
    assert summary["grades"]["failed"] >= 1  # the judge's nonsense was recorded, the run went on
    # a blank concept says nothing: an invalid reply, repaired once, then a failed item kept for reading
    assert summary["reflections"]["failed"] >= 1
    invalid = (root / "runs" / "r" / "invalid-replies.jsonl").read_text()
    assert "says nothing" in invalid
    assert {c.title for c in found} >= {"cancel an order"}
    assert any(r.description == "Cancel a pending order on request." for r in recipes)
    assert "/v1/embeddings" in paths
    assert "brewkb" in first_reflection["messages"][0]["content"]  # the prompt file
    failures = (root / "runs" / "r" / "failures.jsonl").read_text().splitlines()
    assert any(json.loads(f)["stage"] == "grades" for f in failures)
    ledger = (root / "runs" / "r" / "ledger.jsonl").read_text().splitlines()
    assert {json.loads(line)["role"] for line in ledger} >= {"judge", "reflector", "integrator", "embeddings"}


@pytest.mark.skipif(not AIRLINE.is_dir(), reason="needs ../shared/data/tau-bench-airline")
def test_airline_import_reflect_concepts_integrate(make_repo: MakeRepo) -> None:
    root = kb(make_repo)
    import_trajectories(AIRLINE / "gpt-4o-trajectories.json", "tau-bench", run="air", start=root)
    summary = reflect("air", start=root)
    assert "is a train task of environment 'shop'" in summary["relabel"]["skipped_reason"]
    found = concepts("air", start=root)
    slugs = {c.slug for c in found}
    assert {"cancel-reservation", "update-reservation-flights"} <= slugs
    assert "book-reservation" not in slugs  # the conversations of one task booked and passed: too little support
    recipes, _ = integrate("air", start=root)
    assert len(recipes) == len(found) and all(r.section("How to perform") for r in recipes)


def test_unknown_run_is_a_clear_error(make_repo: MakeRepo) -> None:
    root = kb(make_repo)
    with pytest.raises(RunError, match="no run 'nope'"):
        reflect("nope", start=root)


@pytest.fixture
def ray_cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time, whatever the parallel workers
def test_rollouts_on_a_local_ray_cluster(make_repo: MakeRepo, ray_cluster: None) -> None:
    local = kb(make_repo, name="local")
    distributed = kb(make_repo, '[executor]\nname = "ray"\n', name="ray")
    rollout(run="r", splits=("train",), start=local)
    rollout(run="r", splits=("train",), start=distributed)
    one = [t.id for t in read_jsonl(local / "runs" / "r" / "rollouts.jsonl")]
    two = [t.id for t in read_jsonl(distributed / "runs" / "r" / "rollouts.jsonl")]
    assert one == two and len(one) == 16


def test_concept_names_are_cleaned() -> None:
    assert clean_concept("  Cancel   an order. ") == "cancel an order"
    assert clean_concept("") is None and clean_concept("x" * 5000) is None


def test_agglomerative_clustering_by_hand() -> None:
    vectors = np.array([[1.0, 0.0], [0.95, 0.05], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
    assert agglomerate(vectors, 0.9) == [0, 0, 1, 1, 2]
    assert agglomerate(vectors, 0.999) == [0, 1, 2, 3, 4]
    assert agglomerate(vectors, -1.0) == [0, 0, 0, 0, 0]


def test_concepts_map_train_and_eval_tasks() -> None:
    def ins(concept: str, task: str) -> Insight:
        return Insight(concept, "x", "prescriptive", f"s-{task}", task)

    train = [ins("cancel order", "t1"), ins("cancel orders", "t2"), ins("cancel order", "t3"), ins("kb", "t4")]
    evaluation = [ins("cancel the order", "e1"), ins("ship to mars", "e2")]
    names = ["cancel order", "cancel orders", "cancel the order", "kb", "ship to mars"]
    from brewkb.llm.embed import hashed_ngram_embeddings

    found, mapping, dropped = build_concepts(train, evaluation, names, hashed_ngram_embeddings(names), 0.6)
    assert dropped == []
    cancel = found[0]
    assert (cancel.slug, cancel.aliases, cancel.q_train, cancel.q_eval) == (
        "cancel-order", ("cancel orders",), ("t1", "t2", "t3"), ("e1",))
    assert found[1].slug == "kb-concept"  # a reserved ref name is never a concept slug
    assert "ship to mars" not in mapping
    assert concept_slugs(["A b", "a-b", "pr"]) == ["a-b", "a-b-2", "pr-concept"]
    # an action only eval conversations passed with is said to be left out, not left unsaid
    done = Insight("ship to mars", "did `ship_to_mars(x)`", "prescriptive", "s-e3", "e3", "", ("ship_to_mars(x)",),
                   "steps")
    _, mapping, dropped = build_concepts(train, [*evaluation, done], names, hashed_ngram_embeddings(names), 0.6)
    assert "ship to mars" not in mapping
    assert dropped == ["'ship to mars' dropped: only conversations held out to choose recipe versions (the eval "
                       "split) did it; none the run learns from"]
    odd = Insight("skip identity verification", "x", "prescriptive", "s-e4", "e4", "", ("skip_identity_verification()",),
                  "steps")
    names2 = [*names, "skip identity verification"]
    _, _, dropped = build_concepts(train, [odd], names2, hashed_ngram_embeddings(names2), 0.6)
    assert dropped[0].startswith("'skip identity verification' dropped: its name reads as instructions to an agent")


def test_rubric_file_format() -> None:
    rubrics = parse_rubrics("# R\n\n- `no-errors`: No errors.\n* `polite`: Be polite.\n- not a rubric\n")
    assert [(r.id, r.text) for r in rubrics] == [("no-errors", "No errors."), ("polite", "Be polite.")]


def test_cli_runs_the_stages(make_repo: MakeRepo) -> None:
    root = kb(make_repo)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "brewkb", *args], cwd=root, capture_output=True, text=True)

    assert cli("rollout", "--run", "c").returncode == 0
    reflected = cli("reflect", "c").stdout
    assert "insights from" in reflected and reflected.endswith("Next: brewkb concepts c\n")
    clustered = cli("concepts", "c").stdout
    assert "insights" in clustered and clustered.endswith("Next: brewkb integrate c\n")
    done = cli("integrate", "c", "--write", "--json")
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1])["written"]  # events, then the result
    assert "7/7 stages (complete)" in cli("runs").stdout
    for stage in ("reflect", "concepts"):  # shown again on a finished run: no stage to point to
        again = cli(stage, "c")
        assert again.returncode == 0 and "Next:" not in again.stdout, again.stdout


def test_the_test_split_never_enters_a_run(make_repo: MakeRepo) -> None:
    root = make_repo({"brewkb.toml": '[env]\nname = "shop"\noptions = { train = 4, eval = 2, test = 2 }\n'})
    with pytest.raises(RunError, match="brewkb eval --split test"):
        rollout(run="leak", splits=("train", "test"), start=root)
    assert not (root / "runs" / "leak").exists()
    out = subprocess.run([sys.executable, "-m", "brewkb", "rollout", "--run", "leak", "--split", "test"], cwd=root,
                         capture_output=True, text=True)
    assert out.returncode == 2 and "'test' is not one of 'train', 'eval'" in out.stderr
    with pytest.raises(TrajectoryError, match="held out"):
        import_trajectories(Path(__file__).parent / "fixtures" / "openai.jsonl", "openai", run="leak", split="test",
                            start=root)
    assert not (root / "runs" / "leak").exists()

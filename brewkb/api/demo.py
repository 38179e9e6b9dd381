"""``demo``: the whole method on the offline shop world, in a new KB repository."""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from brewkb.api.evaluate import Column
from brewkb.api.kb import init_kb
from brewkb.api.loop import run_command
from brewkb.api.plan import refine_plan
from brewkb.api.refine import RefineResult, arefine
from brewkb.config import CONFIG_FILE
from brewkb.errors import BrewError, GitError
from brewkb.events import Event, EventSink, null_sink
from brewkb.fsutil import write_atomic
from brewkb.git.store import GitStore
from brewkb.run.budget import Limits
from brewkb.run.folder import Run
from brewkb.run.record import EVAL_FILE
from brewkb.run.report import write_report

__all__ = ["DemoResult", "demo", "demo_config", "RUN"]

RUN = "demo"


def demo_config(backend: str, small: bool = False) -> str:
    """The demo's brewkb.toml: the shop world, the offline backend and scripted
    agent (or an LLM and the tool-calling agent), sized to finish in about two
    minutes on two cores; ``small``: a tenth of the tasks and two search
    iterations, and with an LLM a first try sized for a slow endpoint (see
    ``SMALL_LLM``). The model and the endpoints come from the environment
    (docs/llm.md): no model name is written."""
    if backend == "openai" and small:
        return SMALL_LLM
    llm = ('backend = "openai"         # endpoint and key from OPENAI_BASE_URL / OPENAI_API_KEY'
           if backend == "openai" else 'backend = "offline"        # deterministic rules; no model is called')
    agent = "tool-agent" if backend == "openai" else "shop-scripted"
    return f"""\
# brewkb demo: the shop world (a simulation), see docs/shop.md
[llm]
{llm}

[env]
name = "shop"
seed = 0
options = {{ train = {16 if small else 160}, eval = {8 if small else 80}, test = {20 if small else 200} }}

[agent]
name = "{agent}"

[search]
strategy = "mcts"
iterations = {2 if small else 10}
width = 3
depth = 3
"""


SMALL_LLM = """\
# brewkb demo: the shop world (a simulation), see docs/shop.md
# A first try of an endpoint, sized for a slow one (a small model on a laptop's CPU):
# a few hundred LLM calls at most; `brewkb refine --plan` says how many and how long.
[llm]
backend = "openai"         # endpoint and key from OPENAI_BASE_URL / OPENAI_API_KEY; model from OPENAI_MODEL
concurrency = 2            # or the one model the server serves; embeddings: docs/llm.md#embeddings
timeout = 600              # a small model on a CPU takes minutes over a long structured reply
max_retries = 1

[llm.roles.reflector]
max_tokens = 600           # a reflection fits; a small model may ramble to the limit at a few tokens a second

[llm.roles.judge]
max_tokens = 600

[llm.roles.integrator]
max_tokens = 1200

[env]
name = "shop"
seed = 0
options = { train = 4, eval = 2, test = 2 }

[agent]
name = "tool-agent"
max_steps = 5

[stages]
relabel = false
concepts_per_trajectory = 1
integrate_retries = 1
accept_failed = true       # a small model's invalid replies are left out (and listed) rather than stopping the try

[retrieval]
k = 1

[search]
strategy = "greedy"
iterations = 1
width = 1
depth = 1
samples = 1
final_candidates = 1
"""


@dataclass(frozen=True)
class DemoResult:
    root: Path
    refine: RefineResult
    columns: list[Column]
    recipes: int


def _inside_repo(path: Path) -> Path | None:
    probe = path
    while not probe.exists():
        probe = probe.parent
    try:
        store = GitStore(probe)
    except GitError:
        return None
    try:
        return Path(store.work_tree or store.git_dir)
    finally:
        store.close()


def demo(*, directory: Path | None = None, backend: str = "offline", confirm: Callable[[str], bool] = lambda _: False,
         publish: Path | None = None, small: bool = False, max_llm_calls: int | None = None,
         events: EventSink = null_sink, command: str = "brewkb") -> DemoResult:
    """Create a KB in ``directory`` (default ``./brewkb-demo``), refine it on the
    shop world, and compare the learned KB with no KB on the test split
    (``small``: a tenth of the tasks, see ``demo_config``); ``max_llm_calls``
    stops the run there (exit 75; ``refine --resume demo`` goes on). ``command``
    is how the user runs brewkb, for the commands a message suggests."""
    root = (directory or Path.cwd() / "brewkb-demo").resolve()
    if root.exists() and any(root.iterdir()):
        raise BrewError(f"{root} exists and is not empty; " + _made_before(root, command))
    enclosing = _inside_repo(root)
    if enclosing is not None and not confirm(f"{root} is inside the git repository {enclosing}; create the "
                                             "demo's own repository there anyway?"):
        raise BrewError(f"{root} is inside the git repository {enclosing}; pass --dir outside it (or --yes)")
    root.mkdir(parents=True, exist_ok=True)
    init_kb(root, commit=False)
    write_atomic(root / CONFIG_FILE, demo_config(backend, small))
    with GitStore(root, search_parent=False) as store:
        store.commit_all("Start a brewkb knowledge base for the shop demo")
    if backend != "offline":
        plan = refine_plan(start=root)
        events(Event("note", "plan", message=(
            f"at most {plan.episodes} agent episodes and {plan.llm_calls} LLM calls, {plan.minutes:.0f} min at "
            f"{plan.seconds_per_call:g} s per call with {plan.in_flight} in flight (`brewkb -C {root} refine "
            "--plan` has the details; --max-llm-calls bounds a run)")))
    result, columns = run_command(_refine_and_evaluate(root, events, Limits(llm_calls=max_llm_calls)))
    write_report(RUN, start=root)
    with GitStore(root) as store:
        recipes = len(store.read_folder(store.resolve(f"brew/{RUN}/pr"), "recipes"))
    if publish is not None:
        _publish(root, publish)
    return DemoResult(root, result, columns, recipes)


def _made_before(root: Path, command: str) -> str:
    """What to do with a folder a demo already made (finished or interrupted), or with any other folder."""
    if not (root / CONFIG_FILE).is_file() or not (root / "runs" / RUN).is_dir():
        return "pass another --dir"
    try:
        with GitStore(root, search_parent=False) as store:
            finished = store.read_ref(f"refs/heads/brew/{RUN}/pr") is not None
    except GitError:
        return "pass another --dir"
    if finished and (root / "runs" / RUN / "report.md").is_file():
        return (f"a finished demo is there (its report: {root / 'runs' / RUN / 'report.html'}); pass another --dir "
                "to make a new one, or delete the folder")
    here = shlex.quote(str(root))
    try:  # a demo stopped before its search started continues with --run, one stopped in the search with --resume
        searching = Run(RUN, root / "runs" / RUN).manifest().get("search_spec") is not None
    except BrewError:
        searching = False
    refine = f"refine --resume {RUN}" if searching else f"refine --run {RUN}"
    return (f"an interrupted demo is there: finish it with `{command} -C {here} {refine} && {command} "
            f"-C {here} report {RUN}`, or delete the folder (or pass another --dir) to start again")


async def _refine_and_evaluate(root: Path, events: EventSink, limits: Limits) -> tuple[RefineResult, list[Column]]:
    result = await arefine(run=RUN, start=root, events=events, limits=limits)  # ends with the held-out evaluation
    columns = [Column(**c) for c in json.loads((root / "runs" / RUN / EVAL_FILE).read_text())["columns"]]
    return result, columns


def _publish(root: Path, target: Path) -> None:
    """Copy the learned recipes and the run's record (manifest, report, plots)
    into ``target``'s ``recipes/`` and ``runs/demo/``."""
    with GitStore(root) as store:
        files = store.read_folder(store.resolve(f"brew/{RUN}/pr"), "recipes")
    recipes = target / "recipes"
    recipes.mkdir(parents=True, exist_ok=True)
    for old in recipes.glob("*.md"):
        old.unlink()
    for path, data in files.items():
        write_atomic(target / path, data)
    run_dir = target / "runs" / RUN
    if run_dir.exists():
        shutil.rmtree(run_dir)
    source = root / "runs" / RUN
    for name in ("manifest.json", "config.toml", "report.md", "report.html", "eval.json", "concepts.json"):
        if (source / name).exists():
            write_atomic(run_dir / name, (source / name).read_bytes())
    if (source / "plots").is_dir():
        shutil.copytree(source / "plots", run_dir / "plots")

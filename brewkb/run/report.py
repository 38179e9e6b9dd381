"""``brewkb report RUN``: a markdown report and a self-contained HTML page.

Config, stage counts, the ledger, a reward-per-iteration plot (SVG, made with
matplotlib when the ``report`` extra is installed), each concept's search tree
(Mermaid in markdown, nested lists in HTML), the eval table and the recipes'
diff summary.
"""

from __future__ import annotations

import difflib
import html
import json
from pathlib import Path
from typing import Any

from brewkb.fsutil import write_atomic
from brewkb.kb import KB
from brewkb.llm.ledger import read_ledger, summarise
from brewkb.run.folder import LOG_EVAL_FILE, Run
from brewkb.run.record import RunView, change_table, eval_table, final_label, load_run, logs_table
from brewkb.search.render import mermaid
from brewkb.search.tree import Tree

__all__ = ["write_report", "plot_rewards"]

NO_PLOTS = ("Plots need matplotlib: `pip install matplotlib` (in brewkb's checkout: `pip install '.[report]'`), then "
            "run `brewkb report {run}` again.")


def plot_rewards(view: RunView, path: Path) -> bool:
    """Reward of each concept's chosen node per iteration, and the KB's mean.
    Returns False (and writes nothing) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    iterations = list(range(len(view.per_iteration)))
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    concepts = sorted({c for it in view.per_iteration for c in it})
    for concept in concepts:
        ax.plot(iterations, [it.get(concept, float("nan")) for it in view.per_iteration], linewidth=1, alpha=0.6,
                marker=".", label=concept)
    kb_mean = [sum(it.values()) / len(it) if it else float("nan") for it in view.per_iteration]
    ax.plot(iterations, kb_mean, color="black", linewidth=2.5, marker="o", label="whole KB (mean)")
    ax.set_xticks(iterations, _iteration_labels(view))
    ax.set_xlabel("iteration (0 = the integrated roots; final = measured again under the final KB)")
    ax.set_ylabel("reward of the chosen document")
    ax.set_title(f"run {view.run}: reward per iteration")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return True


def _iteration_labels(view: RunView) -> list[str]:
    """x-axis labels: the gathers by number, the last one ``final`` when the run made a final evaluation."""
    labels = [str(i) for i in range(len(view.per_iteration))]
    if view.choices and labels:
        labels[-1] = "final"
    return labels


def _iteration_rows(view: RunView) -> list[str]:
    """The plot's whole-KB line as a table, readable without matplotlib."""
    rows = ["| iteration | whole KB (mean reward of the chosen documents) | concepts |", "|---|---:|---:|"]
    for label, rewards in zip(_iteration_labels(view), view.per_iteration, strict=True):
        mean = f"{sum(rewards.values()) / len(rewards):.3f}" if rewards else "–"
        rows.append(f"| {label} | {mean} | {len(rewards)} |")
    return rows


def _ledger_rows(kb: KB, run: str) -> list[str]:
    totals = summarise(read_ledger(kb.runs_dir / run / "ledger.jsonl"), kb.config.llm.prices)
    rows = ["| role | calls | cached | errors | tokens in | tokens out | cost $ | episodes run | reused |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for role, t in totals.items():
        rows.append(f"| {role} | {t.calls} | {t.cached} | {t.errors} | {t.tokens_in} | {t.tokens_out} | "
                    f"{t.cost:.4f} | {t.episodes_run} | {t.episodes_reused} |")
    return rows if totals else ["No LLM calls (offline backend)."]


def _readable(key: str, value: Any) -> str:
    """One manifest value as a person reads it: rates in %, seconds with a
    unit, commits shortened, lists and mappings spelled out."""
    if isinstance(value, bool) or value is None:
        return "yes" if value else "no"
    if isinstance(value, float):
        if key.endswith("rate"):
            return f"{value:.1%}"
        return f"{value:.1f} s" if key == "seconds" else f"{value:.3g}"
    if isinstance(value, str) and len(value) == 40 and all(ch in "0123456789abcdef" for ch in value):
        return value[:12]
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_readable(str(k), v)}" for k, v in value.items()) or "–"
    if isinstance(value, (list, tuple)):
        return ", ".join(_readable(key, v) for v in value) or "–"
    return str(value)


def _stage_rows(manifest: dict[str, Any]) -> list[str]:
    rows = ["| stage | counts |", "|---|---|"]
    for stage, info in manifest.get("stages", {}).items():
        shown = " · ".join(f"{k.replace('_', ' ')} {_readable(k, v)}" for k, v in sorted(info.items())
                          if k != "finished" and v is not None)
        rows.append(f"| {stage} | {shown.replace('|', '/')} |")
    return rows


def _recipe_texts(kb: KB, view: RunView) -> list[str]:
    """Each changed recipe as the reviewer would see it: a new one in full, a
    rewritten one as a unified diff against the base."""
    prefix = kb.recipes_prefix()
    before = kb.store.read_folder(view.base, prefix)
    after = kb.store.read_folder(view.pr, prefix)
    out: list[str] = []
    for path in sorted(after):
        old, new = before.get(path, b"").decode(), after[path].decode()
        if old == new:
            continue
        if path not in before:
            out += [f"### `{Path(path).stem}` (new)", "", "```markdown", new.rstrip("\n"), "```", ""]
        else:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"a/{path}", f"b/{path}", lineterm="")
            out += [f"### `{Path(path).stem}` (rewritten)", "", "```diff", *diff, "```", ""]
    for path in sorted(set(before) - set(after)):
        out += [f"### `{Path(path).stem}` (removed)", ""]
    return out or ["No recipe changed.", ""]


def _markdown(kb: KB, view: RunView, config: str, manifest: dict[str, Any], plotted: bool) -> str:
    out = [f"# brewkb run `{view.run}`", "",
           f"Base `{view.base[:12]}` → pull-request branch `brew/{view.run}/pr` (`{view.pr[:12]}`).", ""]
    if view.eval:
        out += ["## Evaluation", ""] + eval_table(view.eval) + [""]
    logs = kb.runs_dir / view.run / LOG_EVAL_FILE
    if logs.is_file():  # a distilled run's comparison with the baselines on held-out logs
        out += ["## Compared with the baselines (held-out logs)", ""] + logs_table(json.loads(logs.read_text())) + [""]
    out += ["## Recipes", ""] + change_table(view) + [""]
    out += ["## Recipe text", ""] + _recipe_texts(kb, view)
    out += ["## Reward per iteration", ""]
    out += (["![reward per iteration](plots/rewards.svg)"] if plotted else [NO_PLOTS.format(run=view.run)]) + [""]
    out += _iteration_rows(view) + [""]
    out += ["## Stages", ""] + _stage_rows(manifest) + [""]
    out += ["## LLM ledger", ""] + _ledger_rows(kb, view.run) + [""]
    out += ["## Search trees", "", "R is a node's own reward when the search evaluated it; ★ marks the path to the "
            "chosen node, whose final reward (the one the Recipes table shows) is measured again under the final KB.",
            ""]
    for concept in sorted(view.trees):
        out += [f"### `{concept}`", "", "```mermaid",
                *mermaid(view.trees[concept], view.best[concept], final_label(view, concept)), "```", ""]
    out += ["## Configuration", "", "```toml", config.rstrip() or "# (defaults)", "```", ""]
    return "\n".join(out)


def _html_tree(tree: Tree, best: int, final: str = "") -> str:
    on_path = set(tree.path(best))

    def item(node_id: int) -> str:
        n = tree.nodes[node_id]
        reward = "–" if n.reward is None else f"{n.reward:.3f}"
        label = f"n{n.id} · R {reward} · mean {n.mean:.3f} · {n.visits} visit{'' if n.visits == 1 else 's'}" + (" ★" if node_id in on_path else "")
        label += f" · {final}" if final and node_id == best else ""
        children = "".join(item(c) for c in n.children)
        return f"<li>{html.escape(label)}{'<ul>' + children + '</ul>' if children else ''}</li>"

    return f"<ul class='tree'>{item(0)}</ul>"


def _html(markdown: str, view: RunView, svg: str | None) -> str:
    """A self-contained page: tables and text from the markdown, the SVG inlined,
    trees as nested lists (no script is loaded)."""
    body: list[str] = []
    table: list[str] = []
    in_code = ""  # "", "code" or "mermaid"

    def flush_table() -> None:
        if table:
            cells = [[html.escape(c.strip()).replace("`", "") for c in row.strip("|").split("|")] for row in table]
            head, rows = cells[0], [r for r in cells[2:]]
            body.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>" +
                        "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows) + "</table>")
            table.clear()

    section = ""
    for line in markdown.splitlines():
        if line.startswith("```"):
            if not in_code and line == "```mermaid":
                in_code = "mermaid"
                concept = section.strip("` ")
                if concept in view.trees:
                    body.append(_html_tree(view.trees[concept], view.best[concept], final_label(view, concept)))
                continue
            in_code = "code" if not in_code else ""
            body.append("<pre>" if in_code else "</pre>")
            continue
        if in_code == "mermaid":
            continue
        if in_code:  # a <pre> keeps the line breaks only if the text has them
            body.append(html.escape(line) + "\n")
            continue
        if line.startswith("|"):
            table.append(line)
            continue
        flush_table()
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            section = line.lstrip("# ")
            body.append(f"<h{level}>{html.escape(section).replace('`', '')}</h{level}>")
        elif line.startswith("![") and svg:
            body.append(svg)
        elif line.strip():
            body.append(f"<p>{html.escape(line).replace('`', '')}</p>")
    flush_table()
    style = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
             "table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.25rem .5rem}"
             "pre{background:#f5f5f5;padding:.5rem;overflow:auto;white-space:pre-wrap;overflow-wrap:anywhere}ul.tree{font-family:monospace;font-size:.85rem}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>brewkb run {html.escape(view.run)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def write_report(run: str, *, start: Path = Path(".")) -> list[Path]:
    """Write ``runs/RUN/report.md``, ``report.html`` and ``plots/rewards.svg``."""
    with KB.open(start) as kb:
        folder = Run.at(kb.runs_dir, run).path  # an unknown run lists the runs; links out of the folder are refused
        view = load_run(kb, run)
        manifest = Run(run, folder).manifest()
        config = (folder / "config.toml").read_text() if (folder / "config.toml").exists() else ""
        plot = folder / "plots" / "rewards.svg"
        plotted = plot_rewards(view, plot)
        if not plotted:
            plot.unlink(missing_ok=True)  # an older plot would no longer match the report
        markdown = _markdown(kb, view, config, manifest, plotted)
        write_atomic(folder / "report.md", markdown)
        svg = plot.read_text() if plotted else None
        write_atomic(folder / "report.html", _html(markdown, view, svg))
        return [folder / "report.md", folder / "report.html"] + ([plot] if plotted else [])

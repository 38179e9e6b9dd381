"""``brewkb doctor``."""

from __future__ import annotations

import click

from brewkb.cli.output import echo, echo_json
from brewkb.errors import LLMError


@click.command("doctor")
@click.option("--long-prompt", type=click.IntRange(min=100), default=6000, show_default=True, metavar="WORDS",
              help="Length of the prompt that checks for silent truncation.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor_cmd(long_prompt: int, as_json: bool) -> None:
    """Check each LLM role's endpoint: reachable, model listed, key present,
    structured outputs, tool calling, long prompts. Exit 1 when a role cannot work."""
    from brewkb.api.doctor import doctor
    from brewkb.llm.doctor import CHECKS, OK, SKIP

    result = doctor(long_prompt=long_prompt)
    if as_json:
        echo_json(result.to_json())
    elif not result.roles:
        echo('llm.backend is "offline": every role runs by rules, there is no endpoint to check.')
    else:
        heads = ["role", "endpoint", "model", *CHECKS, "mode"]
        rows = [[r.role, r.endpoint, r.model, *(r.checks[c].short for c in CHECKS), r.mode or SKIP]
                for r in result.roles]
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
        for row in [heads, *rows]:
            echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        # roles that share an endpoint share its findings: each is said once, naming every role it concerns
        notes: dict[str, list[str]] = {}
        for r in result.roles:
            for name, c in r.checks.items():
                if c.status not in (OK, SKIP) and c.detail:
                    notes.setdefault(f"{c.status} {name}: {c.detail}", []).append(r.role)
        if notes:
            echo()
            for line, roles in notes.items():
                echo(f"{', '.join(dict.fromkeys(roles))}: {line}")
    if not result.ok:
        failed = [r.role for r in result.roles if not r.ok]
        raise LLMError(f"{len(failed)} role{'' if len(failed) == 1 else 's'} cannot work as configured ({', '.join(failed)}); "
                       "see the report above and docs/llm.md#endpoint-profiles")

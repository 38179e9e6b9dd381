"""``brewkb serve``: an OpenAI-compatible proxy that gives any agent the KB
by a change of base URL and records its conversations as a serve run
(docs/serve.md).

It is an entry point beside the CLI, the one HTTP server of the package
(aiohttp's): the CLI starts it, and it calls the API (``brewkb.api.serve``)
for the KB, the recipes and the recording as the CLI does. It may import the
API and what is below it, never the CLI.
"""

from __future__ import annotations

from brewkb.serve.server import serve

__all__ = ["serve"]

"""An agent written against the ``openai`` SDK, as most are: a loop of chat
completions with tools. It knows nothing of brewkb; pointing ``OPENAI_BASE_URL``
at ``brewkb serve`` gives it the KB's recipes and records what it does.

    python examples/openai_agent.py "Please cancel order #W1001." ... [--conversations PREFIX]

Each request is a conversation of its own. ``--conversations PREFIX`` names them
``PREFIX-1``, ``PREFIX-2``... in ``X-Brewkb-Conversation`` (optional: without it
brewkb groups the turns by their history), so outcomes can be posted for them
later. The tools answer from a small table, standing in for a real back end.
"""

from __future__ import annotations

import argparse
import json

from openai import OpenAI

TOOLS = [
    {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "required": required, "properties": {p: {"type": "string"} for p in required}}}}
    for name, description, required in (
        ("find_order", "Look an order up by its id.", ["order_id"]),
        ("cancel_order", "Cancel a pending order.", ["order_id", "reason"]),
        ("refund_order", "Refund a delivered order.", ["order_id", "reason"]))
]
ORDERS = {"find_order": {"status": "pending"}, "cancel_order": {"status": "cancelled"},
          "refund_order": {"status": "refunded"}}


def solve(client: OpenAI, request: str, conversation: str | None) -> str | None:
    headers = {"X-Brewkb-Conversation": conversation} if conversation else None
    messages: list = [{"role": "system", "content": "You are a shop's support agent. Use the tools."},
                      {"role": "user", "content": request}]
    for _ in range(6):
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS,
                                               extra_headers=headers).choices[0].message
        messages.append(reply)
        if not reply.tool_calls:
            return reply.content
        for call in reply.tool_calls:
            result = {**ORDERS.get(call.function.name, {}), **json.loads(call.function.arguments or "{}")}
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("requests", nargs="+")
    parser.add_argument("--conversations", default=None, metavar="PREFIX")
    args = parser.parse_args()
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    for number, request in enumerate(args.requests, start=1):
        print(solve(client, request, f"{args.conversations}-{number}" if args.conversations else None))


if __name__ == "__main__":
    main()

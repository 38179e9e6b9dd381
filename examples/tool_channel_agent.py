"""An external agent that uses brewkb's tool channel (docs/agent-protocol.md).

brewkb runs it as a ``command`` agent: one JSON object on stdin, the trajectory
as one JSON object on stdout. It asks an OpenAI-compatible model (OPENAI_BASE_URL,
OPENAI_API_KEY, AGENT_MODEL) and executes the model's tool calls through the
channel, one at a time, until the model answers without calling a tool.

    [agent]
    name = "command"
    command = ["python", "examples/tool_channel_agent.py"]
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

from openai import OpenAI


def call_tool(channel: dict, name: str, arguments: dict) -> str:
    request = urllib.request.Request(
        channel["url"] + "/call", data=json.dumps({"name": name, "arguments": arguments}).encode(),
        headers={"Authorization": f"Bearer {channel['token']}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["content"]


def main() -> None:
    episode = json.load(sys.stdin)
    client = OpenAI()
    messages = [{"role": "system", "content": "Complete the user's task with the tools.\n\n" + episode["context"]},
                {"role": "user", "content": episode["task"]}]
    tools, channel = episode.get("tools") or [], episode.get("tool_channel")
    for _ in range(20):
        reply = client.chat.completions.create(model=os.environ.get("AGENT_MODEL", "gpt-4o-mini"),
                                               messages=messages, tools=tools or None)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls or channel is None:
            break
        for call in message.tool_calls:
            try:
                arguments = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError:
                arguments = {}
            result = call_tool(channel, call.function.name, arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    print(json.dumps({"messages": messages}))


if __name__ == "__main__":
    main()

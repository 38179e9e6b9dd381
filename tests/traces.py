"""Traces made by the real instrumentation libraries, for the importer tests.

``python -m tests.traces MODE OUT [--document]`` runs a small tool-calling
agent loop with the openai SDK against the fake server (tests/fakes), with
one instrumentation on, and writes what it recorded as the OpenTelemetry
Collector's file exporter does: one OTLP/JSON export request per line (trace
and span ids in hex), or with ``--document`` one request as an indented JSON
document. It runs in a process of its own because instrumenting patches the
openai SDK for the whole process.

MODE:
  genai           opentelemetry-instrumentation-openai-v2, latest GenAI conventions, content on the spans
  genai-events    the same, content in ``gen_ai.client.inference.operation.details`` log records
  legacy-events   the instrumentation's v1.30 path: one log record per message (``gen_ai.user.message``...)
  openinference   openinference-instrumentation-openai
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.fakes.openai_server import FakeOpenAI

TOOLS = [{"type": "function", "function": {"name": name, "description": name.replace("_", " "), "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}}}}}
    for name in ("find_order", "cancel_order", "return_order")]

# (request, action, order, whether the action's tool answers with an error)
CONVERSATIONS = [
    ("Please cancel my order #W1001, I ordered it by mistake.", "cancel_order", "#W1001", False),
    ("I want to cancel order #W1002, it is no longer needed.", "cancel_order", "#W1002", False),
    ("Cancel #W1003 please, I found it cheaper elsewhere.", "cancel_order", "#W1003", True),
    ("Could you cancel my order #W1004? Ordered by mistake.", "cancel_order", "#W1004", False),
    ("Cancel order #W1005 for me.", "cancel_order", "#W1005", False),
    ("I would like to return order #W2001, the shoes do not fit.", "return_order", "#W2001", False),
    ("Return my order #W2002 please, it arrived broken.", "return_order", "#W2002", False),
    ("I need to return #W2003, wrong colour.", "return_order", "#W2003", True),
    ("Please return order #W2004, I changed my mind.", "return_order", "#W2004", False),
    ("Start a return for my order #W2005.", "return_order", "#W2005", False),
]


def replies() -> list[dict[str, Any]]:
    """The model's replies, in the order the agent loop asks for them."""
    out: list[dict[str, Any]] = []
    for _, action, order, _ in CONVERSATIONS:
        out.append({"tool_calls": [{"name": "find_order", "arguments": {"order_id": order}}]})
        out.append({"tool_calls": [{"name": action, "arguments": {"order_id": order, "reason": "customer request"}}]})
        out.append({"content": f"Done: {action.split('_')[0]} of {order} is handled."})
    return out


def run_tool(name: str, arguments: str, fails: bool) -> str:
    args = json.loads(arguments)
    if name == "find_order":
        return json.dumps({"order_id": args["order_id"], "status": "pending", "items": ["shoes"]})
    if fails:
        return "Error: the order has already been shipped"
    return json.dumps({"order_id": args["order_id"], "status": name.split("_")[0] + "led"})


def agent_loop(client: Any, tracer: Any, agent_attrs: dict[str, str]) -> None:
    for number, (request, _, _, fails) in enumerate(CONVERSATIONS):
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a shop's support agent."},
                                          {"role": "user", "content": request}]
        with tracer.start_as_current_span("invoke_agent support", attributes={
                **agent_attrs, "conv.number": str(number)}):
            while True:
                reply = client.chat.completions.create(model="fake", messages=messages, tools=TOOLS)
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    break
                for call in message.tool_calls:
                    messages.append({"role": "tool", "tool_call_id": call.id,
                                     "content": run_tool(call.function.name, call.function.arguments, fails)})


def _hex_ids(value: Any) -> Any:
    """protobuf's JSON has base64 ids; OTLP/JSON (and the Collector) writes hex."""
    import base64

    if isinstance(value, dict):
        return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") and v else _hex_ids(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def record(mode: str) -> list[dict[str, Any]]:
    """The export requests the run produced: span batches, then log batches."""
    import openai
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from opentelemetry.sdk.trace.id_generator import IdGenerator

    class Counted(IdGenerator):
        """Ids from a counter, so every run records the same traces (and a log's held-out tasks stay put)."""

        def __init__(self) -> None:
            self.last = 0

        def generate_span_id(self) -> int:
            self.last += 1
            return self.last

        def generate_trace_id(self) -> int:
            self.last += 1
            return 1 << 64 | self.last

    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tracer_provider = TracerProvider(id_generator=Counted())
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    if mode == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

        OpenInference().instrument(tracer_provider=tracer_provider)
        agent_attrs = {"openinference.span.kind": "AGENT"}
    else:
        import opentelemetry.instrumentation.openai_v2 as openai_v2

        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = {
            "genai": "SPAN_ONLY", "genai-events": "EVENT_ONLY", "legacy-events": "true"}[mode]
        if mode == "legacy-events":
            # util-genai 1.0b0 always answers "experimental"; the instrumentation's own
            # v1.30 code path (one event per message) is what older releases ran by default
            openai_v2.is_experimental_mode = lambda: False
        openai_v2.OpenAIInstrumentor().instrument(tracer_provider=tracer_provider, logger_provider=logger_provider)
        agent_attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}
    with FakeOpenAI().reply(*replies()) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        agent_loop(client, tracer_provider.get_tracer("support-agent"), agent_attrs)
    finished, records = list(spans.get_finished_spans()), list(logs.get_finished_logs())
    requests = [MessageToDict(encode_spans(finished[i:i + 7])) for i in range(0, len(finished), 7)]
    requests += [MessageToDict(encode_logs(records[i:i + 9])) for i in range(0, len(records), 9)]
    return [_hex_ids(r) for r in requests]


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    requests = record(mode)
    if "--document" in sys.argv:
        merged: dict[str, list[Any]] = {}
        for request in requests:
            for key, value in request.items():
                merged.setdefault(key, []).extend(value)
        out.write_text(json.dumps(merged, indent=2) + "\n")
    else:
        out.write_text("".join(json.dumps(r) + "\n" for r in requests))


if __name__ == "__main__":
    main()

"""The do-nothing baseline for SpreadsheetBench, as a `command` agent: it submits
code that copies the input workbook to the output unchanged. Cases whose input
already matches the answer in the answer range pass (docs/spreadsheetbench.md).
Configure it with:  [agent] name = "command"  command = ["python", "examples/sheet_do_nothing_agent.py"]
"""

import json
import sys

request = json.load(sys.stdin)
code = "import os, shutil\nshutil.copyfile(os.environ['INPUT_PATH'], os.environ['OUTPUT_PATH'])\n"
call = {"id": "c1", "type": "function", "function": {"name": "run_python", "arguments": json.dumps({"code": code})}}
messages = [
    {"role": "user", "content": request["task"]},
    {"role": "assistant", "content": None, "tool_calls": [call]},
    {"role": "tool", "tool_call_id": "c1", "content": "submitted"},
    {"role": "assistant", "content": "The workbook is unchanged."},
]
print(json.dumps({"messages": messages}))

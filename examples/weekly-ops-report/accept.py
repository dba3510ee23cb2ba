#!/usr/bin/env python3
"""Close-out check: the report was sent (its Message-ID recorded) and is the accepted one.

Run by retrysafe at close-out and by `retrysafe verify`, with
RETRYSAFE_OUTCOME_KEY set; it reads the ledger through `retrysafe status`.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

key = os.environ["RETRYSAFE_OUTCOME_KEY"]
status = json.loads(subprocess.run(["retrysafe", "status", key, "--json"], capture_output=True,
                                   text=True, check=True).stdout)
steps = {s["name"]: s for s in status["steps"]}
report, send = steps.get("render"), steps.get("send")
if report is None or send is None:
    sys.exit("the report was not rendered and sent")
if not (send["evidence"] or "").startswith("<"):
    sys.exit(f"no Message-ID recorded for the send step: {send['evidence']!r}")
week = key.split(":", 1)[1].split("~", 1)[0]
if f"# Weekly ops report {week}" not in Path(report["artifact"]).read_text(encoding="utf-8"):
    sys.exit(f"the accepted report is not the report of {week}")

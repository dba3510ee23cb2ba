#!/usr/bin/env python3
"""Render the weekly ops report for the week in the outcome key (into $RETRYSAFE_OUTPUT).

A real job would query its monitoring; this one makes up the numbers, and
stamps the time it rendered, so a second rendering is never identical: a
retry must send the report that was accepted the first time.
"""

import datetime as dt
import os
import random

key = os.environ["RETRYSAFE_OUTCOME_KEY"]
week = key.split(":", 1)[1].split("~", 1)[0]
now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
lines = [
    f"# Weekly ops report {week}",
    "",
    f"Rendered {now}.",
    "",
    f"- deploys: {random.randint(10, 40)}",
    f"- incidents: {random.randint(0, 3)}",
    f"- p95 latency: {random.randint(120, 300)} ms",
    "",
]
with open(os.environ["RETRYSAFE_OUTPUT"], "w", encoding="utf-8") as fh:
    fh.write("\n".join(lines))

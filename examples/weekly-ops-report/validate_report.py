#!/usr/bin/env python3
"""Accept a rendered report only if it has the week's heading and every figure."""

import os
import sys

text = open(os.environ["RETRYSAFE_OUTPUT"], encoding="utf-8").read()
ok = text.startswith("# Weekly ops report ") and all(
    label in text for label in ("deploys:", "incidents:", "p95 latency:"))
sys.exit(0 if ok else 1)

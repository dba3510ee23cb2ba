#!/usr/bin/env python3
"""Accept a rendered report only if it has the week's heading and every figure."""

import os
import sys
from pathlib import Path

text = Path(os.environ["RETRYSAFE_OUTPUT"]).read_text(encoding="utf-8")
ok = text.startswith("# Weekly ops report ") and all(
    label in text for label in ("deploys:", "incidents:", "p95 latency:"))
sys.exit(0 if ok else 1)

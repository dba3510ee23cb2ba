#!/usr/bin/env python3
"""Build a step's payload (JSON) from the frozen draft: payload.py post|chat DRAFT [POST_ID]."""

import json
import sys
from pathlib import Path

kind, draft = sys.argv[1], sys.argv[2]
text = Path(draft).read_text(encoding="utf-8")
title = text.splitlines()[0].lstrip("# ").strip()
if kind == "post":
    payload = {"title": title, "body": text}
elif kind == "chat":
    payload = {"title": f"New post: {title}", "post": sys.argv[3]}
else:
    payload = {"title": title}
print(json.dumps(payload))

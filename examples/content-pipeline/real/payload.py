#!/usr/bin/env python3
"""Build a step's payload (JSON) from the frozen draft, in the real systems' shapes.

    payload.py post DRAFT           # WordPress: {"title", "content"}
    payload.py chat DRAFT POST      # Matrix: {"body"}; POST is the publish step's "ID LINK"

``pipeline.sh`` (the same file as the loopback run's) calls the ``payload.py``
next to it, so this folder's run sends these shapes and nothing else changes.
"""

import json
import sys
from pathlib import Path

kind, draft = sys.argv[1], sys.argv[2]
text = Path(draft).read_text(encoding="utf-8")
title = text.splitlines()[0].lstrip("# ").strip()
if kind == "post":
    payload = {"title": title, "content": text}
elif kind == "chat":
    link = sys.argv[3].split()[-1]
    payload = {"body": f"New post: {title} {link}"}
else:
    payload = {"title": title}
print(json.dumps(payload))

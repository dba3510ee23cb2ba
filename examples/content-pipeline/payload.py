#!/usr/bin/env python3
"""Build a step's payload (JSON) from the frozen draft: payload.py post|chat DRAFT [POST_ID]."""

import json
import sys

kind, draft = sys.argv[1], sys.argv[2]
text = open(draft, encoding="utf-8").read()
title = text.splitlines()[0].lstrip("# ").strip()
if kind == "post":
    payload = {"title": title, "body": text}
elif kind == "chat":
    payload = {"title": f"New post: {title}", "post": sys.argv[3]}
else:
    payload = {"title": title}
print(json.dumps(payload))

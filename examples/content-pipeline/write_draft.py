#!/usr/bin/env python3
"""Stands in for the model: a different draft on every call.

That is the point of the example: once a draft is accepted, every retry
must publish *that* draft, not a fresh one.
"""

import os
import random
import uuid

topics = ["release notes", "incident review", "roadmap", "hiring update", "customer story"]
title = f"This week: {random.choice(topics)} ({uuid.uuid4().hex[:6]})"
body = f"Draft {uuid.uuid4()}\n\nEverything we shipped, in one page.\n"
with open(os.environ["RETRYSAFE_OUTPUT"], "w", encoding="utf-8") as fh:
    fh.write(f"# {title}\n\n{body}")

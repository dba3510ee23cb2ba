"""Optional OpenTelemetry: an attempt of ``retrysafe run`` is a span carrying the
outcome key, and its command gets TRACEPARENT of that span (in the caller's trace)."""

from __future__ import annotations

import json
from pathlib import Path

from support import Home

PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_attempt_span_hands_traceparent_to_the_command(home: Home, tmp_path: Path) -> None:
    """With a console exporter: the span is printed with the outcome key and job, the
    command's TRACEPARENT names it, in the trace of the TRACEPARENT given to the run."""
    home.path.mkdir()
    home.config('[jobs.t]\nkey = "t:{n}"\nparams = { n = "slug" }\n')
    seen = tmp_path / "traceparent"
    cmd = ["sh", "-c", f'printf %s "$TRACEPARENT" > {seen}']
    got = home.run("run", "t", "-p", "n=1", "--", *cmd,
                   env={"OTEL_TRACES_EXPORTER": "console",
                        "TRACEPARENT": f"00-{PARENT_TRACE}-00f067aa0ba902b7-01"})
    assert got.returncode == 0, got.stderr
    version, trace_id, span_id, flags = seen.read_text().split("-")
    assert (version, trace_id, flags) == ("00", PARENT_TRACE, "01")
    start = got.stderr.index("{")
    span = json.JSONDecoder().raw_decode(got.stderr[start:])[0]
    assert span["name"] == "retrysafe.attempt"
    assert span["attributes"]["retrysafe.outcome_key"] == "t:1"
    assert span["context"]["span_id"] == f"0x{span_id}"
    assert span["parent_id"] == "0x00f067aa0ba902b7"


def test_without_a_configured_tracer_the_command_gets_no_traceparent(home: Home, tmp_path: Path) -> None:
    """Tracing off (the default): no TRACEPARENT is invented, nothing printed."""
    home.path.mkdir()
    home.config('[jobs.t]\nkey = "t:{n}"\nparams = { n = "slug" }\n')
    seen = tmp_path / "traceparent"
    got = home.run("run", "t", "-p", "n=2", "--", "sh", "-c", f'printf %s "${{TRACEPARENT-none}}" > {seen}')
    assert got.returncode == 0 and seen.read_text() == "none" and "retrysafe.attempt" not in got.stderr


def test_a_step_is_a_span_in_its_attempt_s_trace(home: Home, tmp_path: Path) -> None:
    """``retrysafe step`` inside the run: a ``retrysafe.step`` span with the outcome and
    step keys and the effect class, a child of the attempt's span."""
    import sys

    home.path.mkdir()
    home.config('[jobs.t]\nkey = "t:{n}"\nparams = { n = "slug" }\n')
    got = home.run("run", "t", "-p", "n=3", "--", sys.executable, "-m", "retrysafe", "step", "send",
                   "--class", "message", "--", "echo", "m-1",
                   env={"OTEL_TRACES_EXPORTER": "console"})
    assert got.returncode == 0, got.stderr
    spans, text, decoder = [], got.stderr, json.JSONDecoder()
    while (start := text.find("{")) >= 0:
        span, end = decoder.raw_decode(text[start:])
        spans.append(span)
        text = text[start + end:]
    by_name = {s["name"]: s for s in spans}
    step, attempt = by_name["retrysafe.step"], by_name["retrysafe.attempt"]
    assert step["attributes"] == {"retrysafe.outcome_key": "t:3", "retrysafe.step_key": "t:3/send",
                                  "retrysafe.effect_class": "message"}
    assert step["parent_id"] == attempt["context"]["span_id"]
    assert step["context"]["trace_id"] == attempt["context"]["trace_id"]

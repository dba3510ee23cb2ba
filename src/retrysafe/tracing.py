"""Optional OpenTelemetry spans (the ``otel`` extra).

An attempt run by ``retrysafe run`` is a span (``retrysafe.attempt``) carrying
the outcome key, the job and the attempt's number and fencing token; its
command gets ``TRACEPARENT`` (W3C trace context), so the steps it runs and
whatever they call can join the trace. A ``TRACEPARENT`` given to
``retrysafe run`` makes the attempt a child of the caller's trace.
:func:`step_span` gives a step's span (with its step key) to code that runs
steps itself.

Nothing happens unless the ``otel`` extra is installed and a tracer provider
is configured: by the program (``opentelemetry.trace.set_tracer_provider``), or
here when ``OTEL_TRACES_EXPORTER=console`` (spans printed as JSON on stderr).
Without them no OpenTelemetry module is imported.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .attempt import Run

__all__ = ["TRACEPARENT", "attempt_span", "step_span"]

TRACEPARENT = "TRACEPARENT"
_configured: bool | None = None


def _tracer() -> Any | None:
    """The tracer, or ``None`` when tracing is off (no extra, nothing configured)."""
    global _configured
    console = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console"
    if not console and "opentelemetry.trace" not in sys.modules:
        return None  # nothing configured a provider: never import OpenTelemetry
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    if _configured is None:
        _configured = False
        if console:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

            sdk = TracerProvider(resource=Resource.create({"service.name": "retrysafe"}))
            sdk.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
            trace.set_tracer_provider(sdk)
            _configured = True
    provider = trace.get_tracer_provider()
    if not _configured and type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return None
    return trace.get_tracer("retrysafe")


def _parent(env: Mapping[str, str]) -> Any | None:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": env[TRACEPARENT]} if env.get(TRACEPARENT) else {}
    return TraceContextTextMapPropagator().extract(carrier) if carrier else None


@contextlib.contextmanager
def attempt_span(run: Run) -> Iterator[dict[str, str]]:
    """A span around an attempt's command; yields the environment to add to the
    command's (``TRACEPARENT``), empty when tracing is off."""
    tracer = _tracer()
    if tracer is None or run.attempt is None:
        yield {}
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    attrs = {"retrysafe.outcome_key": run.key, "retrysafe.job": run.job.name,
             "retrysafe.attempt": run.attempt.number, "retrysafe.fence": run.attempt.fence}
    with tracer.start_as_current_span("retrysafe.attempt", context=_parent(os.environ),
                                      attributes=attrs):
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        yield {TRACEPARENT: carrier["traceparent"]} if "traceparent" in carrier else {}


@contextlib.contextmanager
def step_span(outcome_key: str, step_key: str, effect_class: str = "") -> Iterator[None]:
    """A span around one step, a child of the current span or of ``TRACEPARENT``."""
    tracer = _tracer()
    if tracer is None:
        yield
        return
    from opentelemetry import trace

    parent = None if trace.get_current_span().get_span_context().is_valid else _parent(os.environ)
    with tracer.start_as_current_span("retrysafe.step", context=parent, attributes={
            "retrysafe.outcome_key": outcome_key, "retrysafe.step_key": step_key,
            "retrysafe.effect_class": effect_class}):
        yield

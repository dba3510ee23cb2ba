"""The process's one heartbeat thread: it renews every attempt the process runs,
stops renewing one as soon as its run stops, and ends a lost lease's beat."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from retrysafe import heartbeat
from retrysafe.engine import Engine
from retrysafe.errors import StaleAttempt

CONFIG = '[jobs.j]\nkey = "j:{n}"\nparams = { n = "slug" }\nlease_seconds = 2\n'


def _beats() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "retrysafe-heartbeat"]


def test_many_attempts_share_one_thread_and_each_lease_is_renewed(tmp_path: Path) -> None:
    (tmp_path / "retrysafe.toml").write_text(CONFIG, "utf-8")
    with Engine.open(tmp_path) as engine:
        for n in range(20):  # one after another, as a worker handles outcomes
            with engine.start("j", {"n": f"a{n}"}) as run:
                run.effect("send", "local_write", execute=lambda _k: "ok")
        assert len(_beats()) <= 1
        runs = [engine.begin("j", {"n": f"b{n}"}).run for n in range(3)]  # at once
        first = [r.attempt.lease_expires for r in runs if r and r.attempt]
        for r in runs:
            assert r is not None
            r.start_heartbeat(interval=0.1)
        time.sleep(0.6)
        assert len(_beats()) == 1
        for r in runs:
            assert r is not None and r.attempt is not None
            r.stop_heartbeat()
            now = engine.ledger.attempt(r.attempt.id)
            assert now is not None and now.lease_expires > first[runs.index(r)]
            r.close(success=True)


def test_a_stopped_heartbeat_renews_no_more(tmp_path: Path) -> None:
    (tmp_path / "retrysafe.toml").write_text(CONFIG, "utf-8")
    calls: list[float] = []
    in_renew = threading.Event()

    def slow_renew() -> bool:
        calls.append(time.monotonic())
        in_renew.set()
        time.sleep(0.3)
        return True

    beat = heartbeat.Beat(0.05, slow_renew)
    heartbeat.add(beat)
    assert in_renew.wait(5)
    t0 = time.monotonic()
    heartbeat.remove(beat)  # waits for the renewal in flight
    assert time.monotonic() - t0 > 0.1
    count = len(calls)
    time.sleep(0.3)
    assert len(calls) == count


@pytest.mark.parametrize("raises", [False, True], ids=["quiet", "on_lost-raises"])
def test_a_lost_lease_sets_lost_and_calls_on_lost_once(tmp_path: Path, raises: bool) -> None:
    """A human breaks the lease: the next renewal sets ``lost`` and calls ``on_lost``
    once, and the beat ends, even when ``on_lost`` itself fails."""
    (tmp_path / "retrysafe.toml").write_text(CONFIG, "utf-8")
    with Engine.open(tmp_path) as engine:
        run = engine.begin("j", {"n": "x"}).run
        assert run is not None and run.attempt is not None
        told: list[int] = []

        def on_lost() -> None:
            told.append(1)
            if raises:
                raise RuntimeError("the caller's handler failed")

        run.on_lost = on_lost
        engine.ledger.break_lease("j:x", actor="ops")
        run.start_heartbeat(interval=0.05)
        assert run.lost.wait(5)
        time.sleep(0.3)
        assert told == [1]
        run.stop_heartbeat()


def _child(home: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with Engine.open(Path(home)) as engine:
        run = engine.begin("j", {"n": "child"}).run
        assert run is not None and run.attempt is not None
        before = run.attempt.lease_expires
        run.start_heartbeat(interval=0.05)
        time.sleep(0.4)
        run.stop_heartbeat()
        now = engine.ledger.attempt(run.attempt.id)
        out.put(now is not None and now.lease_expires > before)
        run.close(success=True)


def test_a_forked_child_gets_its_own_heartbeat(tmp_path: Path) -> None:
    (tmp_path / "retrysafe.toml").write_text(CONFIG, "utf-8")
    keep = heartbeat.Beat(60, lambda: True)
    heartbeat.add(keep)  # the parent's thread exists before the fork
    try:
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        proc = ctx.Process(target=_child, args=(str(tmp_path), out))
        proc.start()
        assert out.get(timeout=20) is True
        proc.join(10)
        assert proc.exitcode == 0
    finally:
        heartbeat.remove(keep)


def test_a_renewal_that_outlives_its_stop_tells_nobody(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """stop_heartbeat gives up waiting for a hung renewal after STOP_WAIT; when that
    renewal then finds the lease lost, the stopped run is not told (its process may
    be gone, its pid reused)."""
    monkeypatch.setattr(heartbeat, "STOP_WAIT", 0.05)
    (tmp_path / "retrysafe.toml").write_text(CONFIG, "utf-8")
    with Engine.open(tmp_path) as engine:
        run = engine.begin("j", {"n": "z"}).run
        assert run is not None
        entered = threading.Event()

        def slow_stale(*_a: object) -> float:
            entered.set()
            time.sleep(0.3)
            raise StaleAttempt("taken over")

        monkeypatch.setattr(run.ledger, "renew", slow_stale)
        told: list[int] = []
        run.on_lost = lambda: told.append(1)
        run.start_heartbeat(interval=0.05)
        assert entered.wait(5)
        run.stop_heartbeat()
        time.sleep(0.5)
        assert told == [] and not run.lost.is_set()

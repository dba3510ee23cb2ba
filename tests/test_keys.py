"""Key rendering, parameter types and slugging, with property-based tests."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrysafe.config import parse_job
from retrysafe.errors import ConfigError, InvalidInput, InvalidParameter
from retrysafe.folders import outcome_dir
from retrysafe.keys import MAX_KEY_LENGTH, slug, step_key, unslug, validate_param


@given(st.text(min_size=1, max_size=120))
def test_slug_round_trips_and_is_a_single_safe_name(key: str) -> None:
    """Every key becomes one folder name that decodes back to the key."""
    s = slug(key)
    assert "/" not in s and "\x00" not in s and s not in (".", "..") and not s.startswith(".")
    assert len(s.encode()) <= 255
    if "~" not in s:
        assert unslug(s) == key


@given(st.text(min_size=1, max_size=255))
def test_no_key_reaches_outside_runs(key: str) -> None:
    """outcome_dir is always a direct grandchild of runs/."""
    home = Path("/h")
    path = outcome_dir(home, "job", key)
    assert path.parent == home / "runs" / "job"


@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60))
def test_distinct_keys_get_distinct_slugs(a: str, b: str) -> None:
    """The slug is injective for keys short enough not to be cut."""
    if a != b:
        assert slug(a) != slug(b)


@given(st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31)))
def test_every_real_iso_week_is_accepted(day: dt.date) -> None:
    """isoweek accepts exactly the weeks that exist."""
    year, week, _ = day.isocalendar()
    if year <= 9999:
        text = f"{year:04d}-W{week:02d}"
        assert validate_param("w", "isoweek", text) == text


@pytest.mark.parametrize("bad", ["2026-W54", "2026-W00", "2026-w01", "2026W01", "2021-W53", ""])
def test_impossible_weeks_are_refused(bad: str) -> None:
    """2026 has 52 weeks... and 2021 too; week 0 never exists."""
    with pytest.raises(InvalidParameter):
        validate_param("w", "isoweek", bad)


def test_2020_has_week_53() -> None:
    """A 53-week year keeps its last week."""
    assert validate_param("w", "isoweek", "2020-W53") == "2020-W53"


@pytest.mark.parametrize(("type_", "value", "canonical"), [
    ("int", "007", "7"), ("date", "2026-02-28", "2026-02-28"), ("month", "2026-12", "2026-12"),
    ("slug", "ops-team", "ops-team"), ("str", "Jake's report", "Jake's report"),
])
def test_values_are_canonical(type_: str, value: str, canonical: str) -> None:
    """Equal values give equal keys: 007 and 7 are one outcome."""
    assert validate_param("p", type_, value) == canonical


@pytest.mark.parametrize(("type_", "value"), [
    ("int", "1.5"), ("date", "2026-02-30"), ("month", "2026-13"), ("slug", "Ops"),
    ("slug", "a--b"), ("str", " padded"), ("str", "tab\there"), ("str", "x" * 201),
])
def test_invalid_values_are_refused(type_: str, value: str) -> None:
    """Each type rejects what it cannot represent exactly."""
    with pytest.raises(InvalidParameter):
        validate_param("p", type_, value)


@given(st.from_regex(r"[a-z0-9]{1,20}", fullmatch=True))
def test_rendering_is_deterministic(team: str) -> None:
    """The same parameters always render the same key: never the clock or the attempt."""
    job = parse_job("r", {"key": "r:{team}", "params": {"team": "slug"}})
    assert job.outcome_key({"team": team})[0] == job.outcome_key({"team": team})[0] == f"r:{team}"


def test_key_length_is_capped() -> None:
    """Rendered keys longer than 255 characters are refused."""
    job = parse_job("r", {"key": "r:{a}:{b}", "params": {"a": "str", "b": "str"}})
    with pytest.raises(InvalidInput, match=str(MAX_KEY_LENGTH)):
        job.outcome_key({"a": "x" * 150, "b": "y" * 150})


@pytest.mark.parametrize("name", ["a/b", "..", ".hidden", "", "a b", "x" * 65, "tab\t"])
def test_step_names_cannot_form_paths(name: str) -> None:
    """Step names stay single, printable path components."""
    with pytest.raises(InvalidInput):
        step_key("k", name)


def test_template_errors_are_config_errors() -> None:
    """A template with a format spec or an undeclared field is a config error."""
    with pytest.raises(ConfigError):
        parse_job("r", {"key": "r:{a:>5}", "params": {"a": "str"}})
    with pytest.raises(ConfigError):
        parse_job("r", {"key": "r:{b}", "params": {"a": "str"}})


_names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,8}\Z").filter(lambda n: ".." not in n)
"""valid step and item names (keys.check_name refuses "..")"""


@given(st.text(min_size=1, max_size=30), _names, st.none() | _names,
       st.text(min_size=1, max_size=30), _names, st.none() | _names)
def test_step_keys_are_unambiguous_and_read_back(o1: str, s1: str, i1: str | None,
                                                 o2: str, s2: str, i2: str | None) -> None:
    """No two (outcome, step, item) triples render the same step key, whatever the
    outcome key holds ("/", "//", a trailing "/"), and a key reads back to its triple;
    keys of outcomes without "/" read as they always did."""
    from retrysafe.keys import split_step_key

    k1, k2 = step_key(o1, s1, i1), step_key(o2, s2, i2)
    assert split_step_key(k1) == (o1, s1, i1)
    assert (k1 == k2) == ((o1, s1, i1) == (o2, s2, i2))
    if "/" not in o1:
        assert k1 == f"{o1}/{s1}" + (f"/{i1}" if i1 else "")


def test_the_colliding_pair_of_the_old_rendering_gets_two_keys() -> None:
    assert step_key("rep:eng/send", "mail") == "rep:eng/send//mail"
    assert step_key("rep:eng", "send", "mail") == "rep:eng/send/mail"
    assert step_key("a/", "b") == "a///b"

"""`retrysafe generate --item`: each item's artifact in a file of its own, driven as a
user does, by `retrysafe run JOB -- sh -c '...'`."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from support import Home

RS = f"{sys.executable} -m retrysafe"
KEY = "report:2026-W10"


def setup_job(home: Home) -> None:
    home.path.mkdir(parents=True, exist_ok=True)
    home.config("""
        [jobs.report]
        key = "report:{week}"
        params = { week = "isoweek" }
        max_attempts = 5
        lease_seconds = 60
    """)


def gen(item: str, marker: Path, *extra: str) -> str:
    """A shell line: generate `draft` for ITEM (the generator notes each run in MARKER)."""
    write = f"echo {shlex.quote(item)} >> {shlex.quote(str(marker))}; echo text-of-$ITEM > \"$RETRYSAFE_OUTPUT\""
    return (f"ITEM={shlex.quote(item)} {RS} generate draft --item {shlex.quote(item)} "
            + " ".join(shlex.quote(e) for e in extra) + f" -- sh -c {shlex.quote(write)}")


def run(home: Home, script: str) -> tuple[int, str, str]:
    proc = home.run("run", "report", "-p", "week=2026-W10", "--", "sh", "-c", script)
    return proc.returncode, proc.stdout, proc.stderr


def steps(home: Home) -> dict[str, dict[str, object]]:
    status = json.loads(home.run("status", KEY, "--json").stdout)
    return {s["step_key"]: s for s in status["steps"]}


def test_two_items_get_distinct_artifacts_and_a_retry_reuses_both(home: Home,
                                                                   tmp_path: Path) -> None:
    """Without --output each item writes a file of its own: both are accepted and
    distinct; a retry finds both accepted, prints the same paths, runs no generator."""
    setup_job(home)
    marker, paths = tmp_path / "ran", tmp_path / "paths"
    script = (f"{gen('a', marker)} >> {paths} && {gen('b', marker)} >> {paths} "
              f"&& {gen('a', marker)} >> {paths} && exit 1")  # fail the attempt: a retry comes
    rc, out, err = run(home, script)
    assert rc == 1, out + err
    first = paths.read_text().splitlines()
    assert len(first) == 3 and first[0] != first[1] and first[2] == first[0], first
    assert [Path(p).read_text() for p in first[:2]] == ["text-of-a\n", "text-of-b\n"]
    assert marker.read_text() == "a\nb\n"
    recorded = steps(home)
    assert recorded[f"{KEY}/draft/a"]["state"] == "done"
    assert recorded[f"{KEY}/draft/b"]["state"] == "done"
    assert {recorded[f"{KEY}/draft/a"]["artifact"], recorded[f"{KEY}/draft/b"]["artifact"]} \
        == set(first[:2])

    paths.unlink()
    rc, out, err = run(home, f"{gen('a', marker)} >> {paths} && {gen('b', marker)} >> {paths}")
    assert rc == 0, out + err
    assert paths.read_text().splitlines() == first[:2]  # the accepted artifacts, as they were
    assert marker.read_text() == "a\nb\n"  # no generator ran again
    assert [Path(p).read_text() for p in first[:2]] == ["text-of-a\n", "text-of-b\n"]


def test_an_output_that_is_another_items_artifact_is_refused(home: Home, tmp_path: Path) -> None:
    """--output naming a file another item (or step) already holds as its accepted
    artifact: exit 2, one line naming that item, before CMD runs; the first artifact
    stays as accepted and its item's next generate reuses it."""
    setup_job(home)
    marker, codes = tmp_path / "ran", tmp_path / "codes"
    rs_other = f"{RS} generate other --output shared.md -- sh -c 'echo o > \"$RETRYSAFE_OUTPUT\"'"
    script = (f"{gen('a', marker, '--output', 'shared.md')}; "
              f"{gen('b', marker, '--output', 'shared.md')} 2> {tmp_path / 'err-b'}; echo $? >> {codes}; "
              f"{rs_other} 2> {tmp_path / 'err-o'}; echo $? >> {codes}; "
              f"{gen('a', marker, '--output', 'shared.md')}; echo $? >> {codes}")
    rc, out, err = run(home, script)
    assert codes.read_text().split() == ["2", "2", "0"], out + err
    for name in ("err-b", "err-o"):
        lines = (tmp_path / name).read_text().strip().splitlines()
        assert len(lines) == 1 and "item a" in lines[0] and "shared.md" in lines[0], lines
    assert marker.read_text() == "a\n"  # b's generator never ran
    recorded = steps(home)
    artifact = Path(str(recorded[f"{KEY}/draft/a"]["artifact"]))
    assert artifact.name == "shared.md" and artifact.read_text() == "text-of-a\n"
    assert f"{KEY}/draft/b" not in recorded and f"{KEY}/other" not in recorded
    assert rc == 0, out + err


def test_item_ids_that_are_not_names_cannot_escape_the_attempt_folder(home: Home,
                                                                      tmp_path: Path) -> None:
    """Ids with '/', a space or '..' are refused (exit 2) before anything runs; nothing
    is written outside the attempt folder. Ids with dots get a file in it."""
    setup_job(home)
    marker, codes = tmp_path / "ran", tmp_path / "codes"
    bad = ["../../escape", "a/b", "a b", "..", "x..y", "/abs"]
    script = "".join(f"{gen(item, marker)} 2>> {tmp_path / 'err'}; echo $? >> {codes}; "
                     for item in bad)
    script += f"{gen('v1.2', marker)} > {tmp_path / 'dotted'}"
    rc, out, err = run(home, script)
    assert rc == 0, out + err
    assert codes.read_text().split() == ["2"] * len(bad)
    assert len((tmp_path / "err").read_text().strip().splitlines()) == len(bad)
    assert marker.read_text() == "v1.2\n"
    dotted = Path((tmp_path / "dotted").read_text().strip())
    attempt_dir = home.path / "runs" / "report" / "report+2026-W10" / "attempt-1"
    assert dotted.parent == attempt_dir and dotted.read_text() == "text-of-v1.2\n"
    assert not (tmp_path / "escape").exists() and not (home.path / "escape").exists()
    assert not any("escape" in str(p) for p in tmp_path.rglob("*"))


def test_each_items_prompt_is_kept_apart(home: Home, tmp_path: Path) -> None:
    """--prompt with --item: each item's copy of its prompt is its own (NAME+ITEM.prompt,
    whatever its --output), so a second item's prompt never replaces the one recorded
    with the first."""
    setup_job(home)
    marker = tmp_path / "ran"
    for item in ("a", "b"):
        (tmp_path / f"{item}.txt").write_text(f"prompt of {item}\n")
    script = " && ".join(gen(item, marker, "--prompt", str(tmp_path / f"{item}.txt"),
                             "--output", f"draft-{item}.md") for item in ("a", "b"))
    rc, out, err = run(home, script)
    assert rc == 0, out + err
    recorded = steps(home)
    for item in ("a", "b"):
        fields = recorded[f"{KEY}/draft/{item}"]["evidence_fields"]
        assert isinstance(fields, dict)
        copy = Path(fields["prompt_copy"])
        assert copy.name == f"draft+{item}.prompt" and copy.read_text() == f"prompt of {item}\n"

"""The config file under hostile hands: typos, odd layouts, links, read-only files and
two ``job add`` at once. Each is refused with one line (exit 2), or reported by
``doctor`` (exit 1), and no job already written is lost."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from support import Home

JOB = """
    [jobs.report]
    key = "report:{n}"
    params = { n = "int" }
"""


def one_line(proc: subprocess.CompletedProcess[str], code: int = 2, match: str = "") -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retrysafe: "), proc.stderr
    assert "internal error" not in proc.stderr
    assert match.lower() in lines[0].lower(), lines[0]


def add(home: Home, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return home.run("job", "add", name, "--key", f"{name}:{{n}}", "--param", "n=int", *extra)


@pytest.mark.parametrize(("text", "match"), [
    ('[ledgr]\nurl = "sqlite:///elsewhere.sqlite3"\n', "unknown table [ledgr]"),
    ('[job.report]\nkey = "report:{n}"\nparams = { n = "int" }\n', "unknown table [job]"),
    ('[ledger]\nsqlite_synchronus = "normal"\n', "unknown field ledger.sqlite_synchronus"),
    ('[ledger]\nurll = "postgresql://db/ops"\n', "unknown field ledger.urll"),
])
def test_a_mistyped_table_or_ledger_field_is_refused_not_ignored(
        home: Home, text: str, match: str) -> None:
    home.path.mkdir(parents=True)
    home.config(text)
    one_line(home.run("jobs"), match=match)
    doctor = home.run("doctor", "--json")
    assert doctor.returncode == 1, doctor.stderr
    assert match in json.loads(doctor.stdout)["config_error"]


def test_a_bad_job_name_in_the_config_is_a_config_error_doctor_reports(home: Home) -> None:
    home.path.mkdir(parents=True)
    home.config('[jobs."a b"]\nkey = "a:{n}"\nparams = { n = "int" }\n')
    one_line(home.run("jobs"), match=f"config {home.path / 'retrysafe.toml'}: job name 'a b'")
    doctor = home.run("doctor", "--json")
    assert doctor.returncode == 1, (doctor.stdout, doctor.stderr)
    assert "job name 'a b' is not valid" in json.loads(doctor.stdout)["config_error"]


def test_a_deeply_nested_config_is_a_config_error(home: Home) -> None:
    home.path.mkdir(parents=True)
    (home.path / "retrysafe.toml").write_text("a = " + "[" * 100_000)
    one_line(home.run("jobs"), match="nested too deeply")
    doctor = home.run("doctor", "--json")
    assert doctor.returncode == 1, (doctor.stdout, doctor.stderr)
    assert "nested too deeply" in json.loads(doctor.stdout)["config_error"]


def test_a_byte_order_mark_is_named(home: Home) -> None:
    home.path.mkdir(parents=True)
    (home.path / "retrysafe.toml").write_bytes(b"\xef\xbb\xbf" + JOB.encode())
    one_line(home.run("jobs"), match="byte order mark")
    assert "byte order mark" in json.loads(home.run("doctor", "--json").stdout)["config_error"]


def test_concurrent_job_adds_keep_every_job(home: Home) -> None:
    home.path.mkdir(parents=True)
    home.config("# jobs\n")
    procs = [home.popen("job", "add", f"j{i}", "--key", f"j{i}:{{n}}", "--param", "n=int")
             for i in range(12)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    jobs = tomllib.loads((home.path / "retrysafe.toml").read_text())["jobs"]
    assert sorted(jobs) == sorted(f"j{i}" for i in range(12))


@pytest.mark.parametrize("text", [
    'jobs = { report = { key = "report:{n}", params = { n = "int" } } }\n',
    'jobs.report.key = "report:{n}"\njobs.report.params = { n = "int" }\n',
    '[jobs]\nreport = { key = "report:{n}", params = { n = "int" } }\n',
])
def test_job_add_never_breaks_a_config_laid_out_otherwise(home: Home, text: str) -> None:
    home.path.mkdir(parents=True)
    path = home.config(text)
    proc = add(home, "new")
    after = tomllib.loads(path.read_text())
    if proc.returncode == 0:  # written, with every job as it was
        assert after["jobs"]["report"] == {"key": "report:{n}", "params": {"n": "int"}}
        assert after["jobs"]["new"] == {"key": "new:{n}", "params": {"n": "int"}}
    else:  # refused with one line, nothing written
        one_line(proc, match="by hand")
        assert path.read_text() == text
    assert home.run("jobs").returncode == 0


def test_job_add_writes_through_a_linked_config(home: Home, tmp_path: Path) -> None:
    home.path.mkdir(parents=True)
    kept = tmp_path / "dotfiles" / "retrysafe.toml"
    kept.parent.mkdir()
    kept.write_text("# kept in dotfiles\n")
    (home.path / "retrysafe.toml").symlink_to(kept)
    assert add(home, "new").returncode == 0
    assert (home.path / "retrysafe.toml").is_symlink()
    assert "new" in tomllib.loads(kept.read_text())["jobs"]
    assert kept.read_text().startswith("# kept in dotfiles\n")


def test_job_add_refuses_a_read_only_config(home: Home) -> None:
    home.path.mkdir(parents=True)
    path = home.config(JOB)
    path.chmod(0o444)
    one_line(add(home, "new"), match="read-only")
    assert "new" not in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o444


def test_replace_names_the_fields_it_drops(home: Home) -> None:
    home.path.mkdir(parents=True)
    home.config(JOB + "max_attempts = 3\n[jobs.report.classes.message]\napproval = true\n")
    proc = home.run("job", "add", "report", "--key", "report:{n}", "--param", "n=int", "--replace")
    assert proc.returncode == 0, proc.stderr
    assert "replaced job report" in proc.stdout
    assert "classes" in proc.stdout and "max_attempts" in proc.stdout


def test_comments_and_other_tables_are_kept(home: Home) -> None:
    home.path.mkdir(parents=True)
    text = ('# top\n[ledger]\nsqlite_synchronous = "full"   # durable\n\n'
            '[jobs.report]  # weekly\nkey = "report:{n}"\nparams = { n = "int" }\n')
    path = home.config(text)
    assert add(home, "new").returncode == 0
    assert path.read_text().startswith(text)


def test_a_relative_sqlite_path_is_one_ledger_from_any_folder(home: Home) -> None:
    """`[ledger] url = "sqlite:///led.sqlite3"` is the file beside the config, whatever the
    working folder: a nested step after a `cd` records into it (it opened another ledger
    and failed), and a run from another folder finds the outcome done (it was refused)."""
    import json
    import sys

    home.path.mkdir(parents=True, exist_ok=True)
    (home.path / "sub").mkdir()
    home.config('[ledger]\nurl = "sqlite:///led.sqlite3"\n'
                '[jobs.bench]\nkey = "bench:{run}"\nparams = { run = "slug" }\n')
    step = f"cd sub && {sys.executable} -m retrysafe step s1 --class message -- echo ev-1"
    ran = home.run("run", "bench", "-p", "run=a", "--", "sh", "-c", step, cwd=home.path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (home.path / "led.sqlite3").is_file() and not (home.path / "sub" / "led.sqlite3").exists()
    again = home.run("run", "bench", "-p", "run=a", "--", "false", cwd=home.path / "sub")
    assert again.returncode == 0 and "already done" in again.stdout, again.stdout + again.stderr
    status = json.loads(home.run("status", "bench:a", "--json", cwd=home.path / "sub").stdout)
    assert [s["evidence"] for s in status["steps"]] == ["ev-1"]

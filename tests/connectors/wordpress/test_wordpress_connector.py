"""The WordPress connector on a real WordPress (Debian's package, PHP, MariaDB).

What WordPress really does, and what the connector makes of it: the key lives
in post meta (found only through the plugin's query parameter, exactly, drafts
included); slugs are a fallback that proves little on its own; an error answer
after a create may hide a created post; and a changed payload updates the
post in place only when the step allows it.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from wpserver import FAIL_AFTER_INSERT, PASSWORD_ENV, WordPressSite

import retrysafe
from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.wordpress import PLUGIN_PATH, WordPressConnector, slug_for_key
from retrysafe.errors import ConfigError, ConnectorError, PayloadMismatch


@pytest.fixture
def key() -> str:
    """A step key no other test uses (the site lives for the whole session)."""
    return f"blog:2026-W32/{uuid.uuid4().hex[:8]}/publish"


def connector(site: WordPressSite, **extra: Any) -> WordPressConnector:
    conn = build_connector("blog", {"type": "wordpress", **site.config(**extra)})
    assert isinstance(conn, WordPressConnector)
    return conn


def keyless_post(site: WordPressSite, slug: str, status: str = "draft", key: str | None = None) -> int:
    """A post made straight through the REST API, with this slug and no key (or another key)."""
    body: dict[str, Any] = {"title": "made by hand", "slug": slug, "status": status}
    if key is not None:
        body["meta"] = {"retrysafe_key": key}
    resp = site.rest("POST", "/wp/v2/posts", json=body)
    assert resp.status_code == 201, resp.text
    return int(resp.json()["id"])


def test_execute_creates_a_draft_with_the_key_in_meta_and_a_slug_from_the_key(wordpress: WordPressSite, key: str) -> None:
    """One draft, its meta holds the step key, its slug is derived from the key; the
    evidence is one line: the post id and its link."""
    evidence = connector(wordpress).execute(key, {"title": "Week 32", "content": "<p>Hi</p>"})
    [(post_id, status, slug)] = wordpress.posts_with_key(key)
    assert (status, slug) == ("draft", slug_for_key(key))
    assert evidence == f"{post_id} {wordpress.url}/?p={post_id}" and "\n" not in evidence
    assert slug_for_key(key) == slug_for_key(key) != slug_for_key(key + "x")


def test_lookup_finds_the_post_by_its_key_after_a_person_renamed_its_slug(wordpress: WordPressSite, key: str) -> None:
    """The key, not the slug, is what identifies the post: an edited slug changes nothing."""
    conn = connector(wordpress)
    evidence = conn.execute(key, {"title": "Week 32"})
    post_id = int(evidence.split()[0])
    assert wordpress.rest("POST", f"/wp/v2/posts/{post_id}", json={"slug": "renamed-by-hand"}).status_code == 200
    assert conn.lookup(key, {}) == Found(evidence, {"post_id": post_id, "matched_by": "key"})


def test_lookup_matches_the_key_exactly_though_the_database_ignores_case(wordpress: WordPressSite, key: str) -> None:
    """MariaDB's default collation would match ``BLOG:...`` to ``blog:...``; the lookup does not."""
    conn = connector(wordpress)
    conn.execute(key, {"title": "Week 32"})
    assert conn.lookup(key.upper(), {}) == ABSENT


def test_a_published_post_is_found_and_drafts_are_found_too(wordpress: WordPressSite, key: str) -> None:
    """Drafts are visible only to an authenticated editor asking for every status: the
    lookup does both, so a draft and a published post are found alike."""
    conn = connector(wordpress, status="publish")
    evidence = conn.execute(key, {"title": "Week 32"})
    assert wordpress.posts_with_key(key)[0][1] == "publish"
    assert conn.lookup(key, {}) == Found(evidence, {"post_id": int(evidence.split()[0]), "matched_by": "key"})


def test_a_post_without_its_key_but_with_its_slug_is_found_by_the_slug(wordpress: WordPressSite, key: str) -> None:
    """One keyless post with the key's slug (a create that died before its meta was written) is found."""
    post_id = keyless_post(wordpress, slug_for_key(key))
    assert connector(wordpress).lookup(key, {}) == Found(wordpress.evidence(post_id),
                                                          {"post_id": post_id, "matched_by": "slug"})


def test_two_keyless_posts_with_the_slug_are_ambiguous(wordpress: WordPressSite, key: str) -> None:
    """Two published posts asked for the same slug: WordPress silently made the second
    ``-2``. Neither carries the key, so the lookup cannot tell which is this step's."""
    slug = slug_for_key(key)
    first, second = keyless_post(wordpress, slug, "publish"), keyless_post(wordpress, slug, "publish")
    assert [p[2] for p in wordpress.posts_with_slug(slug) + wordpress.posts_with_slug(f"{slug}-2")] == [slug, f"{slug}-2"]
    result = connector(wordpress).lookup(key, {})
    assert isinstance(result, Ambiguous)
    assert f"{first} ({slug})" in result.reason and f"{second} ({slug}-2)" in result.reason


def test_a_post_with_the_slug_but_another_key_is_not_this_steps(wordpress: WordPressSite, key: str) -> None:
    """A slug proves nothing alone: a post carrying another key is someone else's effect."""
    keyless_post(wordpress, slug_for_key(key), key=f"{key}-other")
    assert connector(wordpress).lookup(key, {}) == ABSENT


def test_a_post_in_the_trash_with_the_key_is_ambiguous(wordpress: WordPressSite, key: str) -> None:
    """``status=any`` leaves trashed posts out; the lookup asks for them too and lets a
    person decide rather than creating a second post, and verify no longer holds."""
    conn = connector(wordpress)
    evidence = conn.execute(key, {"title": "Week 32"})
    assert wordpress.rest("DELETE", f"/wp/v2/posts/{evidence.split()[0]}").status_code == 200  # to the trash
    result = conn.lookup(key, {})
    assert isinstance(result, Ambiguous) and "in the trash" in result.reason
    assert not conn.verify(key, evidence)


def test_an_error_answer_after_the_create_is_unknown_and_the_rerun_finds_the_post(
    wordpress: WordPressSite, key: str, spawn: Any
) -> None:
    """WordPress inserts the post, then answers 500 before writing the key: not a
    failure (the post exists) but unknown. The re-run looks first, finds the post by
    its slug, and creates nothing."""
    payload = {"title": f"Week 32 {FAIL_AFTER_INSERT}"}
    code, out = spawn("wordpress", wordpress.config(), key, payload)
    assert code == 0 and out["error"].startswith("ConnectorError:") and "answered 500" in out["error"]
    [(post_id, _, _)] = wordpress.posts_with_slug(slug_for_key(key))
    assert wordpress.posts_with_key(key) == []
    with pytest.raises(ConnectorError) as raised:
        connector(wordpress).execute(f"{key}-again", payload)
    assert not isinstance(raised.value, EffectFailed)

    code, out = spawn("wordpress", wordpress.config(), key, payload)
    assert (code, out) == (0, {"found": wordpress.evidence(post_id)})
    assert len(wordpress.posts_with_slug(slug_for_key(key))) == 1


def test_a_refused_login_is_a_failure_and_creates_nothing(wordpress: WordPressSite, key: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """WordPress checks the credentials before it creates anything: a definite failure."""
    monkeypatch.setenv(PASSWORD_ENV, "abcd efgh ijkl mnop qrst uvwx")
    with pytest.raises(EffectFailed, match="refused the post \\(401\\)") as raised:
        connector(wordpress).execute(key, {"title": "Week 32"})
    assert "abcd" not in str(raised.value)
    assert wordpress.posts_with_slug(slug_for_key(key)) == []


def test_a_changed_payload_updates_the_post_in_place_only_when_the_step_allows_it(
    wordpress: WordPressSite, tmp_path: Path
) -> None:
    """A re-run with another text is refused by default; allowed, the same post
    (same id, same key) gets the new title and status, and no second post appears."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "retrysafe.toml").write_text('[jobs.blog]\nkey = "blog:{week}"\nparams = { week = "isoweek" }\n')
    week = f"2026-W{uuid.uuid4().int % 50 + 1:02d}"
    conn = connector(wordpress)
    # The first attempt publishes, then fails later on: the outcome is not done.
    with pytest.raises(RuntimeError), retrysafe.start("blog", {"week": week}, home=home) as run:
        first = run.effect("publish", connector=conn, payload={"title": "Draft one"})
        step_key = f"{run.key}/publish"
        raise RuntimeError("the next step broke")
    with pytest.raises(PayloadMismatch, match="allow updating in place"), \
            retrysafe.start("blog", {"week": week}, home=home) as run:
        run.effect("publish", connector=conn, payload={"title": "Draft two"})
    with retrysafe.start("blog", {"week": week}, home=home) as run:
        second = run.effect("publish", connector=conn, payload={"title": "Draft two", "status": "publish"},
                            allow_update=True)
    post_id = int(first.split()[0])
    assert second.split()[0] == str(post_id)
    assert wordpress.posts_with_key(step_key) == [(post_id, "publish", slug_for_key(step_key))]
    assert (wordpress.post(post_id) or {})["title"] == "Draft two"


def test_without_the_plugin_the_lookup_says_so_instead_of_trusting_every_post(
    wordpress: WordPressSite, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Core ignores the unknown query parameter and answers every post, none with the
    key field: the lookup is Ambiguous and names the plugin; a create is unknown."""
    keyless_post(wordpress, f"other-{uuid.uuid4().hex[:6]}")
    monkeypatch.setenv(PASSWORD_ENV, wordpress.noplugin_password)
    conn = connector(wordpress, user="noplugin")
    result = conn.lookup(key, {})
    assert isinstance(result, Ambiguous) and "retrysafe-keys.php" in result.reason
    with pytest.raises(ConnectorError, match="did not keep its retrysafe key"):
        conn.execute(key, {"title": "Week 32"})
    assert wordpress.posts_with_key(key) == [] and len(wordpress.posts_with_slug(slug_for_key(key))) == 1


def test_the_plugin_ships_with_the_package_and_bad_config_is_refused() -> None:
    """The must-use plugin is a file of the installed package; config mistakes are one line each."""
    assert PLUGIN_PATH.is_file() and "register_post_meta" in PLUGIN_PATH.read_text()
    with pytest.raises(ConfigError, match="'password_env'"):
        build_connector("blog", {"type": "wordpress", "url": "http://127.0.0.1", "user": "u"})
    with pytest.raises(ConfigError, match="status 'live'"):
        WordPressConnector("blog", "http://127.0.0.1", "u", "p", status="live")
    with pytest.raises(ConfigError, match="must be the site's http"):
        WordPressConnector("blog", "ftp://127.0.0.1", "u", "p")

"""PostgreSQL connection strings as libpq reads them: find the password, mask it,
or move it out.

Pure Python, without psycopg: SQLite users' messages pass through here too,
and a URL must be masked before the driver ever sees it.

Both of libpq's forms are read:

* the URL form, ``postgresql://user:password@host:port/dbname?key=value&...``
  (``postgres://`` too), with percent-decoding as libpq does it;
* the key/value form, ``host=db user=u password='it''s' ...`` (single quotes,
  backslash escapes).

A password typed without percent-encoding (``#``, ``?``, ``/`` or ``@`` in it)
makes the URL mean something else to libpq: ``postgresql://u:p/w@db/x`` is host
``u``, port ``p``, database ``w@db/x``. Such a URL is *unclean*: its structure as
libpq reads it does not hold together (a port that is not a number, an ``@`` in
a host or database name, a query parameter libpq does not know or cannot
split). The mask then reads it the way a person meant it, everything between
the first ``:`` and the last ``@`` is the password, so it is hidden whichever
reading is right.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["MASK", "ConnInfo", "is_postgres_url", "mask", "parse", "secrets", "split_password"]

MASK = "***"
"""What a hidden password is shown as."""

_SCHEMES = ("postgresql://", "postgres://")

#: parameters whose values are secrets
SECRET_KEYS = frozenset({"password", "sslpassword"})

#: libpq's connection keywords (PostgreSQL 18); a URL query naming anything else
#: is refused by libpq, so its text is not trusted to be what it looks like
KEYWORDS = frozenset({
    "application_name", "channel_binding", "client_encoding", "connect_timeout", "dbname",
    "fallback_application_name", "gssdelegation", "gssencmode", "gsslib", "host", "hostaddr",
    "keepalives", "keepalives_count", "keepalives_idle", "keepalives_interval", "krbsrvname",
    "load_balance_hosts", "max_protocol_version", "min_protocol_version", "oauth_ca_file",
    "oauth_client_id", "oauth_client_secret", "oauth_issuer", "oauth_scope", "options",
    "passfile", "password", "port", "replication", "require_auth", "requiressl",
    "scram_client_key", "scram_server_key", "service", "servicefile", "sslcert",
    "sslcertmode", "sslcompression", "sslcrl", "sslcrldir", "sslkey", "sslkeylogfile",
    "sslmode", "sslnegotiation", "sslpassword", "sslrootcert", "sslsni",
    "ssl_max_protocol_version", "ssl_min_protocol_version", "target_session_attrs",
    "tcp_user_timeout", "user",
})

_PERCENT = re.compile(r"%(..)?", re.DOTALL)


@dataclass
class ConnInfo:
    """What :func:`parse` found in a connection string.

    ``spans`` are the secret values as they appear in the text (start, end);
    ``cuts`` the same secrets with their delimiters, to remove them;
    ``password`` is the password libpq would use (the last one given, decoded),
    or ``None``; ``clean`` is whether libpq reads the text the way it looks.
    """

    text: str
    clean: bool = True
    password: str | None = None
    spans: list[tuple[int, int]] = field(default_factory=list)
    cuts: list[tuple[int, int]] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    """Every secret's spelling in the text, decoded and not."""


def is_postgres_url(text: str) -> bool:
    return text.startswith(_SCHEMES)


def _decode(text: str) -> str | None:
    """libpq's percent-decoding: ``None`` where libpq refuses the text (a bad
    escape, an encoded NUL, bytes that are not UTF-8 here)."""
    out = bytearray()
    pos = 0
    for m in _PERCENT.finditer(text):
        out += text[pos:m.start()].encode("utf-8", "surrogatepass")
        pair = m.group(1)
        if pair is None or not re.fullmatch(r"[0-9A-Fa-f]{2}", pair) or pair == "00":
            return None
        out.append(int(pair, 16))
        pos = m.end()
    out += text[pos:].encode("utf-8", "surrogatepass")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _port_ok(port: str) -> bool:
    return port == "" or port.strip().isdigit()


def _hosts_ok(netloc: str) -> bool:
    """``host[:port]`` entries separated by commas, as libpq splits them."""
    if "@" in netloc:
        return False
    for entry in netloc.split(","):
        if entry.startswith("["):
            close = entry.find("]")
            if close < 0:
                return False
            rest = entry[close + 1:]
            if rest and not (rest.startswith(":") and _port_ok(rest[1:])):
                return False
        elif ":" in entry and not _port_ok(entry.split(":", 1)[1]):
            return False
    return True


def _parse_url(text: str) -> ConnInfo:
    info = ConnInfo(text)
    start = text.index("://") + 3
    n = len(text)
    # libpq looks ahead for the user designator up to the first '@' or '/'
    p = start
    while p < n and text[p] not in "@/":
        p += 1
    netloc_start = start
    if p < n and text[p] == "@":
        userinfo = text[start:p]
        colon = userinfo.find(":")
        user = userinfo if colon < 0 else userinfo[:colon]
        if _decode(user) is None:
            info.clean = False
        if colon >= 0:
            value = userinfo[colon + 1:]
            info.spans.append((start + colon + 1, p))
            info.cuts.append((start + colon, p))
            info.raw.append(value)
            decoded = _decode(value)
            if decoded is None:
                info.clean = False
            else:
                info.raw.append(decoded)
                info.password = decoded or None
        netloc_start = p + 1
    # the hosts end at the path or the query
    q = netloc_start
    while q < n and text[q] not in "/?":
        q += 1
    if not _hosts_ok(text[netloc_start:q]):
        info.clean = False
    query_at = text.find("?", q)
    if query_at < 0:
        query_at = n
    if "@" in text[q:query_at]:  # a database name holding '@': a password's tail?
        info.clean = False
    if query_at < n:
        pos = query_at + 1
        for param in text[query_at + 1:].split("&"):
            end = pos + len(param)
            if param:
                key, eq, value = param.partition("=")
                dkey = _decode(key)
                if not eq or "=" in value or dkey is None or dkey not in KEYWORDS:
                    info.clean = False
                if dkey in SECRET_KEYS or key in SECRET_KEYS:
                    info.spans.append((pos + len(key) + 1, end))
                    # with the '&' before it, or after it when it is the first
                    info.cuts.append((pos - 1, end) if pos - 1 > query_at or end == n
                                     else (pos, end + 1))
                    info.raw.append(value)
                    decoded = _decode(value)
                    if decoded is None:
                        info.clean = False
                    else:
                        info.raw.append(decoded)
                        if dkey == "password":
                            info.password = decoded or None
            pos = end + 1
    if not info.clean:
        _lenient(info, start)
    return info


def _lenient(info: ConnInfo, start: int) -> None:
    """An unclean URL, read as a person meant it: the password runs from the first
    ':' to the last '@'; a ``password=`` parameter runs to the end."""
    text = info.text
    info.raw = []  # libpq's reading cut the secret into pieces: forget them
    at = text.rfind("@", start)
    spans: list[tuple[int, int]] = []
    cuts: list[tuple[int, int]] = []
    password: str | None = None
    after = start
    if at >= 0:
        colon = text.find(":", start, at)
        if colon >= 0:
            spans.append((colon + 1, at))
            cuts.append((colon, at))
            value = text[colon + 1:at]
            info.raw.append(value)
            password = _decode(value) or value or None
            if password:
                info.raw.append(password)
        after = at + 1
    m = re.search(r"[?&](?:ssl)?password=", text[after:])
    if m:
        begin = after + m.end()
        spans.append((begin, len(text)))
        cuts.append((after + m.start() + (1 if text[after + m.start()] == "?" else 0),
                     len(text)))
        info.raw.append(text[begin:])
    info.spans, info.cuts, info.password = spans, cuts, password


def _parse_keywords(text: str) -> ConnInfo:
    """The ``key=value`` form, read as libpq's ``conninfo_parse`` does."""
    info = ConnInfo(text)
    n = len(text)
    i = 0
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        item_start = i
        while i < n and text[i] != "=" and not text[i].isspace():
            i += 1
        key = text[item_start:i]
        while i < n and text[i].isspace():
            i += 1
        if i >= n or text[i] != "=":
            info.clean = False
            break
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value_start = i
        chars: list[str] = []
        if i < n and text[i] == "'":
            i += 1
            closed = False
            while i < n:
                if text[i] == "\\" and i + 1 < n:
                    chars.append(text[i + 1])
                    i += 2
                elif text[i] == "'":
                    i += 1
                    closed = True
                    break
                else:
                    chars.append(text[i])
                    i += 1
            if not closed:
                info.clean = False
        else:
            while i < n and not text[i].isspace():
                if text[i] == "\\" and i + 1 < n:
                    chars.append(text[i + 1])
                    i += 2
                else:
                    chars.append(text[i])
                    i += 1
        if key in SECRET_KEYS:
            value = "".join(chars)
            info.spans.append((value_start, i))
            info.cuts.append((item_start, i))
            info.raw += [text[value_start:i], value]
            if key == "password":
                info.password = value or None
        if not info.clean:
            break
    if not info.clean:
        # unparseable: everything from the first secret keyword on is hidden
        m = re.search(r"(?:ssl)?password\s*=", text)
        if m:
            info.spans = [(m.end(), n)]
            info.cuts = [(m.start(), n)]
            info.raw.append(text[m.end():].strip())
    return info


def parse(text: str) -> ConnInfo:
    """Read ``text`` as libpq would: a URL or key/value pairs. Anything else
    (``sqlite:///...``, another scheme) holds no secret libpq knows."""
    if is_postgres_url(text):
        return _parse_url(text)
    if "=" in text and "://" not in text.split("=", 1)[0]:
        return _parse_keywords(text)
    return ConnInfo(text)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _replace(text: str, spans: list[tuple[int, int]], by: str) -> str:
    out, pos = [], 0
    for a, b in _merge(spans):
        out += [text[pos:a], by]
        pos = b
    out.append(text[pos:])
    return "".join(out)


def mask(text: str) -> str:
    """``text`` with every password (and ``sslpassword``) shown as ``***``."""
    info = parse(text)
    return _replace(text, info.spans, MASK) if info.spans else text


def split_password(text: str) -> tuple[str, str | None]:
    """``text`` without its passwords, and the password libpq would have used
    (``None`` when it carried none)."""
    info = parse(text)
    if not info.cuts:
        return text, None
    bare = _replace(text, info.cuts, "")
    if bare.endswith("?"):
        bare = bare[:-1]
    return bare, info.password


def secrets(text: str) -> set[str]:
    """Every spelling of the secrets in ``text``, to scrub from messages."""
    return {s for s in parse(text).raw if s}

"""The web-API connectors on their contract stand-ins: conformance cases and starters.

Slack, Discord, Telegram, Stripe and Google Sheets cannot run here, so each is
replaced by a stand-in that speaks its documented wire format
(``servers/<name>_api.py``), run as a real HTTP server on loopback. The cases
below follow the interface of ``test_conformance.Case`` and read each
stand-in's state directly, never through the connector. The per-connector
tests use the same starters (:func:`running`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from retrysafe.connectors import ConnectorBase, build_connector

SERVERS = Path(__file__).resolve().parent / "servers"
if str(SERVERS) not in sys.path:
    sys.path.insert(0, str(SERVERS))

import discord_api  # noqa: E402
import sheets_api  # noqa: E402
import slack_api  # noqa: E402
import standin  # noqa: E402
import stripe_api  # noqa: E402
import telegram_api  # noqa: E402

__all__ = [
    "SERVICE_CASES",
    "Running",
    "discord_api",
    "running",
    "service_account_file",
    "sheets_api",
    "slack_api",
    "stripe_api",
    "telegram_api",
    "with_service_cases",
]

SLACK_ENV, DISCORD_ENV, TELEGRAM_ENV, STRIPE_ENV = (
    "RS_TEST_SLACK_TOKEN",
    "RS_TEST_DISCORD_TOKEN",
    "RS_TEST_TELEGRAM_TOKEN",
    "RS_TEST_STRIPE_KEY",
)
SERVICE_EMAIL = "pipeline@standin-project.iam.gserviceaccount.com"


@functools.cache
def _rsa_pair() -> tuple[str, str]:
    """One RSA key pair per test run (a service account's key)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def service_account_file(tmp_path: Path, base: str) -> Path:
    """A service-account key file whose token_uri is the stand-in's token endpoint."""
    path = tmp_path / "service-account.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "standin-project",
                "private_key_id": "standin-key-1",
                "private_key": _rsa_pair()[0],
                "client_email": SERVICE_EMAIL,
                "client_id": "100000000000000000001",
                "token_uri": f"{base}/token",
            }
        )
    )
    return path


class Running:
    """A stand-in app serving on loopback: ``app`` holds its state, ``base`` its URL."""

    def __init__(self, app: Any, base: str) -> None:
        self.app = app
        self.base = base


@contextlib.contextmanager
def running(kind: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    """Start the stand-in for ``kind`` with its secret in the environment as configs name it."""
    app: standin.App
    if kind == "slack":
        monkeypatch.setenv(SLACK_ENV, slack_api.TOKEN)
        app = slack_api.SlackApp()
    elif kind == "discord":
        monkeypatch.setenv(DISCORD_ENV, discord_api.TOKEN)
        app = discord_api.DiscordApp()
    elif kind == "telegram":
        monkeypatch.setenv(TELEGRAM_ENV, telegram_api.TOKEN)
        app = telegram_api.TelegramApp()
    elif kind == "stripe":
        monkeypatch.setenv(STRIPE_ENV, stripe_api.API_KEY)
        app = stripe_api.StripeApp()
    else:
        app = sheets_api.SheetsApp(_rsa_pair()[1], SERVICE_EMAIL)
    with standin.serve(app) as base:
        yield Running(app, base)


class ServiceCase:
    """The interface of ``test_conformance.Case``, for a connector on a stand-in."""

    type_name = ""
    verify_skip: str | None = None

    def __init__(self, run: Running, config: dict[str, Any], bad: list[tuple[dict[str, Any], str]]) -> None:
        self.run = run
        self.app: Any = run.app
        self.config = config
        self.bad = bad

    def connector(self) -> ConnectorBase:
        return build_connector("under-test", {"type": self.type_name, **self.config})

    def before_rerun(self) -> None:
        """Every stand-in here would show a repeated effect as a second one."""


class SlackCase(ServiceCase):
    type_name = "slack"

    def __init__(self, run: Running, tmp_path: Path) -> None:
        super().__init__(
            run,
            {"token_env": SLACK_ENV, "channel": slack_api.CHANNEL, "base_url": f"{run.base}/api/"},
            [
                ({"text": "Week 32", "metadata": {"event_type": "x"}}, "unknown field(s) metadata"),
                ({"unfurl_links": True}, "needs 'text'"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        return {"text": "Week 32 is out"}

    def _keyed(self, key: str) -> list[dict[str, Any]]:
        return [
            m
            for m in self.app.messages()
            if m.get("metadata", {}).get("event_payload", {}).get("retrysafe_key") == key
        ]

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        found = self._keyed(key)
        return f"{slack_api.CHANNEL}/{found[0]['ts']}" if found else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self._keyed(key))

    def state(self) -> Any:
        return self.app.messages()

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        with self.app.lock:  # someone deletes the message
            self.app.channels[slack_api.CHANNEL] = [
                m for m in self.app.channels[slack_api.CHANNEL] if m not in self._keyed(key)
            ]


class DiscordCase(ServiceCase):
    type_name = "discord"

    def __init__(self, run: Running, tmp_path: Path) -> None:
        super().__init__(
            run,
            {"token_env": DISCORD_ENV, "channel_id": discord_api.CHANNEL, "api_base": f"{run.base}/api/v10"},
            [
                ({"content": "Week 32", "nonce": "mine"}, "unknown field(s) nonce"),
                ({"tts": False}, "needs 'content'"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        return {"content": "Week 32 is out"}

    def _keyed(self, key: str) -> list[dict[str, Any]]:
        from retrysafe.connectors.discord import nonce_of

        return [m for m in self.app.messages() if m.get("nonce") == nonce_of(key)]

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        found = self._keyed(key)
        return str(found[0]["id"]) if found else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self._keyed(key))

    def state(self) -> Any:
        return self.app.messages()

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        with self.app.lock:
            ids = {m["id"] for m in self._keyed(key)}
            self.app.channels[discord_api.CHANNEL] = [
                m for m in self.app.channels[discord_api.CHANNEL] if m["id"] not in ids
            ]


class TelegramCase(ServiceCase):
    """Telegram with a configured lookup (the channel log); without one it cannot pass."""

    type_name = "telegram"

    def __init__(self, run: Running, tmp_path: Path) -> None:
        super().__init__(
            run,
            {
                "token_env": TELEGRAM_ENV,
                "chat_id": telegram_api.CHAT["id"],
                "api_base": run.base,
                "lookup_url": f"{run.base}/log/{telegram_api.CHAT['id']}/messages",
            },
            [
                ({"text": "  "}, "needs 'text'"),
                ({"text": "x", "reply_markup": {}}, "unknown field(s) reply_markup"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        return {"text": "Week 32 is out"}

    def _keyed(self, key: str) -> list[dict[str, Any]]:
        from retrysafe.connectors.telegram import tag_of

        return [m for m in self.app.messages() if m["text"].endswith(tag_of(key))]

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        found = self._keyed(key)
        return f"https://t.me/{telegram_api.CHAT['username']}/{found[0]['message_id']}" if found else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self._keyed(key))

    def state(self) -> Any:
        return self.app.messages()

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        with self.app.lock:
            self.app.sent = [m for m in self.app.sent if m not in self._keyed(key)]


class StripeCase(ServiceCase):
    type_name = "stripe"

    def __init__(self, run: Running, tmp_path: Path) -> None:
        super().__init__(
            run,
            {"api_key_env": STRIPE_ENV, "api_base": run.base},
            [
                ({"amount": 0, "currency": "eur"}, "'amount' must be a whole number"),
                ({"amount": 1500, "currency": "euro"}, "three-letter ISO code"),
                ({"amount": 1500, "currency": "eur", "metadata": {"retrysafe_key": "x"}}, "must not set"),
                ({"amount": 1500, "currency": "eur", "source": "tok"}, "unknown field(s) source"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        return {"amount": 1500, "currency": "eur", "payment_method": "pm_card_visa", "description": "Week 32"}

    def _keyed(self, key: str) -> list[dict[str, Any]]:
        return [pi for pi in self.app.intents.values() if pi["metadata"].get("retrysafe_key") == key]

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        found = self._keyed(key)
        return str(found[0]["id"]) if found else None

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self._keyed(key))

    def state(self) -> Any:
        return json.dumps(
            [{k: v for k, v in pi.items() if k != "_created"} for pi in self.app.intents.values()],
            sort_keys=True,
        )

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        import stripe

        client = stripe.StripeClient(stripe_api.API_KEY, base_addresses={"api": self.run.base})
        for pi in self._keyed(key):  # the payment is refunded from the dashboard
            client.v1.refunds.create(params={"payment_intent": pi["id"]})


class SheetsCase(ServiceCase):
    type_name = "sheets"

    def __init__(self, run: Running, tmp_path: Path) -> None:
        run.app.rows = [["title", "amount", "retrysafe_key"]]
        super().__init__(
            run,
            {
                "spreadsheet_id": sheets_api.SPREADSHEET_ID,
                "worksheet": sheets_api.SHEET["title"],
                "credentials_file": str(service_account_file(tmp_path, run.base)),
                "api_base": run.base,
            },
            [
                ({"title": "x", "retrysafe_key": "forged"}, "must not set the key column"),
                ({"title": {"nested": 1}}, "must be text or a number"),
            ],
        )

    def payload(self) -> dict[str, Any]:
        return {"title": "Week 32", "amount": 7}

    def _rows(self, key: str) -> list[int]:
        return [i for i, row in enumerate(self.app.rows, start=1) if i > 1 and row[2:3] == [key]]

    def evidence(self, key: str, payload: dict[str, Any]) -> str | None:
        rows = self._rows(key)
        if not rows:
            return None
        url = f"https://docs.google.com/spreadsheets/d/{sheets_api.SPREADSHEET_ID}/edit#gid=0"
        return f"Log!{rows[0]}:{rows[0]} {url}&range={rows[0]}:{rows[0]}"

    def count(self, key: str, payload: dict[str, Any]) -> int:
        return len(self._rows(key))

    def state(self) -> Any:
        return [list(row) for row in self.app.rows]

    def change_target(self, key: str, payload: dict[str, Any]) -> None:
        with self.app.lock:  # someone deletes the row
            self.app.rows = [row for row in self.app.rows if row[2:3] != [key]]


_CLASSES: dict[str, type[ServiceCase]] = {
    "slack": SlackCase,
    "discord": DiscordCase,
    "telegram": TelegramCase,
    "stripe": StripeCase,
    "sheets": SheetsCase,
}


@contextlib.contextmanager
def _case(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServiceCase]:
    with running(kind, request.getfixturevalue("monkeypatch")) as run:
        yield _CLASSES[kind](run, tmp_path)


#: type name -> a context manager giving its case, for the conformance ``case`` fixture
SERVICE_CASES: dict[
    str, Callable[[pytest.FixtureRequest, Path], contextlib.AbstractContextManager[ServiceCase]]
] = {kind: functools.partial(_case, kind) for kind in _CLASSES}


def with_service_cases(previous: Any, cases: list[Any]) -> Any:
    """The conformance ``case`` fixture ``previous`` with the stand-in cases added.

    ``cases`` (the suite's list) is extended in place, so the check that every
    registered type is in the suite sees them; other parameters are still
    served by ``previous``.
    """
    earlier = list(cases)
    cases.extend(SERVICE_CASES)
    make_earlier = previous.__wrapped__

    @pytest.fixture(params=[*earlier, *SERVICE_CASES])
    def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
        """Each connector type on its real system or its contract stand-in."""
        if request.param in SERVICE_CASES:
            with SERVICE_CASES[request.param](request, tmp_path) as made:
                yield made
        else:
            yield from make_earlier(request, tmp_path)

    return case

"""The email connector: SMTP to send, IMAP to look before sending again.

SMTP cannot be asked "did you already send this?", so the connector keeps its
own record where a later run can read it: the Sent folder over IMAP. With
``sent_copy = "client"`` (the default) ``execute`` does, in order:

1. search the Sent folder for the step's Message-ID: a copy marked sent means
   the work is already done (its Message-ID is returned, nothing is sent);
2. file a copy there flagged ``$RetrysafePending`` (reusing a pending copy
   left by an earlier try);
3. send it over SMTP;
4. flag the copy ``$RetrysafeSent`` and drop the pending flag.

So ``lookup`` never says "absent" after a send started: no copy means step 3
never began; a copy marked sent means it was sent; a pending copy means a try
died between 2 and 4, and only the recipient's mailbox can tell, which
``[connectors.NAME.recipient_imap]`` lets the connector search itself.

Example config::

    [connectors.mail]
    type = "email"
    from = "Ops <ops@example.com>"
    username = "ops@example.com"
    password_env = "MAIL_PASSWORD"

    [connectors.mail.smtp]
    host = "smtp.example.com"
    security = "starttls"

    [connectors.mail.imap]
    host = "imap.example.com"
    security = "ssl"
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._settings import EmailSettings

if TYPE_CHECKING:
    from ._connector import EmailConnector as EmailConnector
    from ._mailbox import FAILED as FAILED
    from ._mailbox import PENDING as PENDING
    from ._mailbox import SENT as SENT
    from ._message import KEY_HEADER as KEY_HEADER
    from ._message import message_id_for as message_id_for

# FAILED is part of the folder contract documented in docs/connectors/email.md.
__all__ = ["FAILED", "KEY_HEADER", "PENDING", "SENT", "EmailConnector", "EmailSettings",
           "message_id_for"]

# The connector and the names of its messages and folders are imported on first use:
# a config whose email notification channel has its settings checked on every load
# (notify/config.py) imports no SMTP, IMAP, TLS or message code.
_LAZY = {"EmailConnector": "._connector", "FAILED": "._mailbox", "PENDING": "._mailbox",
         "SENT": "._mailbox", "KEY_HEADER": "._message", "message_id_for": "._message"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value

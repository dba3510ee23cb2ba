"""A process that sends one email through the connector and can die mid-way.

Run: ``python crash_child.py CONFIG.json STEP_KEY PAYLOAD.json POINT`` where
POINT is where the process SIGKILLs itself:

* ``before-file``: before the pending copy is filed in the Sent folder;
* ``after-file``: after filing it, before the SMTP send starts;
* ``after-send``: the SMTP server accepted the message, nothing recorded it;
* ``none``: runs to the end and prints the evidence.

A real SIGKILL: no ``finally``, no ``atexit``, no IMAP logout.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from retrysafe.connectors.email import EmailConnector


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class DyingConnector(EmailConnector):
    point = "none"

    def _file_pending(self, sent_box, message):  # type: ignore[no-untyped-def]
        if self.point == "before-file":
            die()
        uids = super()._file_pending(sent_box, message)
        if self.point == "after-file":
            die()
        return uids

    def _mark_sent(self, sent_box, uids):  # type: ignore[no-untyped-def]
        if self.point == "after-send":
            die()
        super()._mark_sent(sent_box, uids)


def main() -> None:
    config_path, step_key, payload_path, point = sys.argv[1:5]
    with open(config_path) as f:
        config = json.load(f)
    with open(payload_path) as f:
        payload = json.load(f)
    connector = DyingConnector.from_config("mail", config)
    connector.point = point
    print(connector.execute(step_key, payload))


if __name__ == "__main__":
    main()

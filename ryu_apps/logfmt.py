"""Log lines as text (the default) or one JSON object per line (``--log-format json``).

In JSON, every line has ``time`` (ISO 8601, UTC), ``level``, ``logger`` and
``message``; a decision (logger ``freeway.decisions``) also carries every field
of its record, the same fields ``/api/v1/decisions`` and the events file show.
In text, decisions are not repeated: the prose lines already say them.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
               "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        decision = getattr(record, "decision", None)
        if decision:
            obj.update({("wall" if k == "time" else k): v for k, v in decision.items()})
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str)


def setup(fmt: str, verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not verbose:
        logging.getLogger("os_ken").setLevel(logging.WARNING)
    logging.getLogger("freeway.decisions").disabled = fmt != "json"

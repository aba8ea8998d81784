"""The `log` import: messages to the host's log.

The host limits the size and rate of messages and may drop some; a message must never
contain row values or secrets. Natively (tests, the case runner) messages go to stderr
as `[LEVEL] message`.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["LEVELS", "log", "trace", "debug", "info", "warn", "error"]

LEVELS = ("trace", "debug", "info", "warn", "error")
"""The WIT `level` cases."""

_wit_log = None
if importlib.util.find_spec("componentize_py_runtime") is not None:
    from wit_world.imports import log as _wit_log  # type: ignore[no-redef]


def log(level: str, message: str) -> None:
    """Logs `message` at `level` (one of `LEVELS`)."""
    if level not in LEVELS:
        raise ValueError(f"log level is one of {', '.join(LEVELS)}")
    if _wit_log is not None:
        _wit_log.log(getattr(_wit_log.Level, level.upper()), message)
    else:
        print(f"[{level}] {message}", file=sys.stderr)


def trace(message: str) -> None:
    """Logs at `trace`."""
    log("trace", message)


def debug(message: str) -> None:
    """Logs at `debug`."""
    log("debug", message)


def info(message: str) -> None:
    """Logs at `info`."""
    log("info", message)


def warn(message: str) -> None:
    """Logs at `warn`."""
    log("warn", message)


def error(message: str) -> None:
    """Logs at `error`."""
    log("error", message)

"""Logging, configured once by the CLI; everything else calls `get_logger()`.

importing structlog (and the rich it pulls in) costs about a fifth of a no-op run;
events below the configured level are dropped before structlog is ever imported.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, MutableMapping

_settings: dict[str, Any] = {"level": logging.WARNING, "format": "console", "ready": False, "redact": None,
                             "forward": None}


def configure(fmt: str = "console", verbose: bool = False, redact: Callable[[Any], Any] | None = None) -> None:
    """redact: applied to every event's fields before they are rendered (the recipe's secrets)."""
    _settings.update(level=logging.INFO if (verbose or fmt == "json") else logging.WARNING, format=fmt,
                     redact=redact, ready=False)


def _redact(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    redact = _settings["redact"]
    return redact(event) if redact else event


def _structlog() -> Any:
    import structlog

    if not _settings["ready"]:
        renderer = (structlog.processors.JSONRenderer() if _settings["format"] == "json"
                    else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
        structlog.configure(
            processors=[_redact, structlog.processors.add_log_level,
                        structlog.processors.TimeStamper(fmt="iso", utc=True), renderer],
            wrapper_class=structlog.make_filtering_bound_logger(_settings["level"]),
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
            cache_logger_on_first_use=False,
        )
        _settings["ready"] = True
    return structlog


def forward_to(sink: Callable[[str, int, str, str, dict[str, Any]], None]) -> None:
    """Every event goes to `sink(name, level, method, event, fields)` instead, whatever its level:
    the SSH helper's (host/transport/sshhelper.py), which its parent logs as its own."""
    _settings["forward"] = sink


class _Logger:
    def __init__(self, name: str) -> None:
        self.name = name

    def _emit(self, level: int, method: str, event: str, **fields: Any) -> None:
        forward = _settings["forward"]
        if forward is not None:
            forward(self.name, level, method, event, fields)
        elif level >= _settings["level"]:
            getattr(_structlog().get_logger(self.name), method)(event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, "info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, "warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, "error", event, **fields)


def get_logger(name: str = "patchkit") -> _Logger:
    return _Logger(name)

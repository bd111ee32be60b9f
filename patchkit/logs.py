"""structlog set-up, done once by the CLI. Everything else just calls structlog.get_logger."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(fmt: str = "console", verbose: bool = False) -> None:
    level = logging.INFO if (verbose or fmt == "json") else logging.WARNING
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )

"""The console logger of our jobs: Dagster's colored console logger at INFO, with input errors
shown as their message alone.

Dagster prints every event at DEBUG by default (a "Type check passed" line per output, resource
set-up, ...): 41 of the sample run's 89 lines. At INFO a run prints our progress lines, the
failures and, last, its ``Run summary`` (:mod:`llm_assets.orchestration.summary`);
``loggers: {console: {config: {log_level: DEBUG}}}`` in a run config brings the events back.

A bad setting, a missing folder or unreadable input is raised by the assets as
:class:`InputFailure` (a ``dg.Failure``); Dagster prints the step's and then the run's failure
with the stack of Dagster frames that led to it. Here both show the message only, which names
the fix: the stack says nothing a person can act on (the UI's run log keeps it). Every other
error keeps its stack.
"""

from __future__ import annotations

import logging

import dagster as dg


class InputFailure(dg.Failure):
    """A run that cannot go on with its input or settings as they are; the message names the fix.
    Not retried: the same input fails the same way."""

    def __init__(self, description: str) -> None:
        super().__init__(description=description, allow_retries=False)


def _input_failure_message(record: logging.LogRecord) -> str | None:
    """The message of the :class:`InputFailure` a failure event of ``record`` carries, if any."""
    meta = getattr(record, "dagster_meta", None) or {}
    event = meta.get("dagster_event")
    error = getattr(getattr(event, "event_specific_data", None), "error", None)
    if error is None or error.cls_name != InputFailure.__name__:
        return None
    _, _, message = error.message.partition(f"{InputFailure.__name__}: ")
    return message.strip() or error.message.strip()


class _ShortInputFailures(logging.Filter):
    """Print an input failure's event as its headline and message, without Dagster's stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = _input_failure_message(record)
        if message is not None:
            headline = str(record.msg).split("\n\n", 1)[0]
            record.msg, record.args = f"{headline}\n\n{message}", ()
        return True


@dg.logger(
    {
        "log_level": dg.Field(
            str, default_value="INFO", description="The lowest level printed (DEBUG: every event)"
        ),
        "name": dg.Field(str, default_value="dagster", description="The logger's name"),
    },
    description="Dagster's colored console logger at INFO; input errors without their stack.",
)
def console_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    """Dagster's console logger, at INFO unless configured, with :class:`_ShortInputFailures`."""
    logger = dg.colored_console_logger.logger_fn(init_context)
    logger.addFilter(_ShortInputFailures())
    return logger

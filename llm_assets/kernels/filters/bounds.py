"""What the Gopher rules share: the refusal of a bad bound, the format of a measured value,
and the drop of every row at its first failing check (reason and measure as the reject's value).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from llm_assets.kernels.filters.base import FILTER_STAGE
from llm_assets.kernels.schema import StageResult, drop_rows


def check_bound(
    owner: str, name: str, value: object, *, integer: bool = False, high: float | None = None
) -> None:
    """Refuse a bound that is not None, not a number >= 0 (an int if ``integer``), or above
    ``high``, naming the field."""
    if value is None:
        return
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, numbers.Integral if integer else numbers.Real)
    if isinstance(value, bool) or not ok_type:
        raise ValueError(f"{owner}.{name} must be {kind} or None, got {value!r}")
    if not value >= 0 or (high is not None and value > high):  # `not >=` also catches NaN
        span = f"between 0 and {high}" if high is not None else ">= 0"
        raise ValueError(f"{owner}.{name} must be {span} (or None), got {value!r}")


def check_order(owner: str, low_name: str, low: float | None, high_name: str, high: float | None):
    if low is not None and high is not None and high < low:
        raise ValueError(f"{owner}.{high_name} ({high}) must be >= {owner}.{low_name} ({low})")


def format_count(value: float) -> str:
    return str(int(value))


def format_length(value: float) -> str:
    return f"{value:.2f}"


def format_share(value: float) -> str:
    text = f"{value:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


# (reason, measure, bound, fails-when-below, value format) in the order the checks run.
Check = tuple[str, str, float | None, bool, Callable[[float], str]]


def drop_first_failure(
    table: pa.Table,
    checks: list[Check],
    measures: dict[str, np.ndarray],
    applies: dict[str, np.ndarray] | None = None,
) -> StageResult:
    """Drop every row that fails an enabled check, with the first failing check's reason and
    its measure as the value. ``applies``: per reason, the rows its check applies to (bool
    array; a reason not named applies to every row)."""
    rows = table.num_rows
    first = np.full(rows, -1, np.int64)
    for i, (reason, measure, bound, below, _fmt) in enumerate(checks):
        if bound is None:
            continue
        values = measures[measure]
        failing = values < bound if below else values > bound
        if applies is not None and reason in applies:
            failing &= applies[reason]
        first[(first < 0) & failing] = i
    dropped = first >= 0
    reasons: list[str] = []
    values_out: list[str | None] = []
    for row in np.flatnonzero(dropped):
        reason, measure, _bound, _below, fmt = checks[first[row]]
        reasons.append(reason)
        values_out.append(fmt(measures[measure][row]))
    return drop_rows(
        table,
        pa.array(dropped, pa.bool_()),
        stage=FILTER_STAGE,
        reasons=reasons,
        values=values_out,
    )

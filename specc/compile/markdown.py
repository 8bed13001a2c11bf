"""The review's text pieces (review.md: the plan's tables, the Slurm jobs' section)."""

from __future__ import annotations

from tabulate import tabulate


def one_line(text: str) -> str:
    """A value as text that cannot break a line or a table (newlines, pipes in values)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r") \
        .replace("|", "\\|")


def table(rows, headers) -> str:
    """A GitHub table whose cells cannot break the layout (newlines, pipes in values)."""
    def cell(x):
        return one_line(x) if isinstance(x, str) else x
    return tabulate([[cell(x) for x in r] for r in rows], headers=headers, tablefmt="github")


def seconds(sec: float | None) -> str:
    if sec is None:
        return "-"
    if sec >= 90:
        return f"{sec / 60:.1f} min"
    return f"{sec:.1f} s"

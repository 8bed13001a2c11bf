"""Text from data as markdown that shows it and builds nothing (report.md, the combined
report, the tune decision): no image, link, HTML or table cell from a run dir's name,
a label or a server's reason."""

from __future__ import annotations

import re

from specc.files import one_line

#: What makes markdown of text: a backslash, code, emphasis, links and images, HTML, a
#: table's cell border.
_MARKUP = re.compile(r"([\\`*\[\]<>|!])")


def md(text) -> str:
    """Text from data (a run dir's name, a label, a server's reason, a stopped text) as
    markdown that shows it and builds nothing: on one line (control characters and
    newlines escaped), every character markdown reads as markup backslash-escaped."""
    return _MARKUP.sub(r"\\\1", one_line(text))


def md_code(text) -> str:
    """Text from data inside a code span: on one line, no backtick to close it."""
    return one_line(text).replace("`", "'")

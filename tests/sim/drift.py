"""Check versions.py's 0.5.23 strings against the released wheel's source (no install).

``python -m tests.sim.drift WHEEL`` prints each string whose literal pieces are
not all found in the source file it cites; exit 1 if any.  A pure function,
``missing(wheel)``, for the CI drift check to reuse.
"""

from __future__ import annotations

import re
import sys
import zipfile

from specc.sim import versions

#: a string literal continued on the next line: "...abc "\n    f"def..." -> "...abc def..."
_CONTINUATION = re.compile(r"""["']\s*\n\s*[rfb]*["']""")


def _source(zf: zipfile.ZipFile, rel: str) -> str:
    text = zf.read("sglang/" + rel).decode("utf-8", "replace")
    return _CONTINUATION.sub("", text)


def missing(wheel: str, version: str = "0.5.23") -> list[tuple[str, str, str]]:
    """(key, source, fragment) for each literal fragment absent from its cited file."""
    out = []
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for key, (template, source) in versions.VERSIONS[version].items():
            if "sglang/" + source not in names:
                if not source.startswith(("uvicorn", "incident")):
                    out.append((key, source, "<file not in wheel>"))
                continue
            text = _source(zf, source)
            for frag in versions.literal_fragments(template):
                if frag not in text:
                    out.append((key, source, frag))
    return out


if __name__ == "__main__":
    bad = missing(sys.argv[1])
    for row in bad:
        print(*row, sep=" | ")
    sys.exit(1 if bad else 0)

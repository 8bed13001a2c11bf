"""report.html: report.md as one self-contained page (no network: styles inline, plots as
PNG data URIs), the run manifest at the end. Rendered from report.md's own text (the tune
decision first when there is one, as report.md has it), so the two never disagree."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

STYLE = """body{font:14px/1.45 system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #ccc;padding:3px 7px}
th{background:#f2f2f2}td{text-align:right}td:first-child{text-align:left}
code{background:#f4f4f4;padding:0 3px}img{max-width:100%}
pre{background:#f7f7f7;padding:.6em;overflow:auto}"""

_IMG = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")
#: A code span, **bold**, or a backslash escape (tables.md writes data so).
_TOKEN = re.compile(r"`([^`]+)`|\*\*((?:\\.|[^*\\])+)\*\*|\\([\\`*\[\]<>|!_#()])")


def _inline(text: str) -> str:
    """`code`, **bold** and backslash escapes; every other character escaped for HTML."""
    out, pos = [], 0
    for m in _TOKEN.finditer(text):
        out.append(html.escape(text[pos:m.start()], quote=False))
        if m.group(1) is not None:
            out.append(f"<code>{html.escape(m.group(1), quote=False)}</code>")
        elif m.group(2) is not None:
            out.append(f"<strong>{_inline(m.group(2))}</strong>")
        else:
            out.append(html.escape(m.group(3), quote=False))
        pos = m.end()
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out)


def _cells(line: str) -> list[str]:
    """A pipe table row's cells; an escaped pipe (\\|) stays in its cell."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip() for c in re.split(r"(?<!\\)\|", inner)]


#: The only images report.html embeds: the run's own plots (plots.py writes them).
PLOTS_DIR = "plots"
PLOT_BYTES = 32 << 20


def _image(alt: str, src: str, run_dir: Path) -> str:
    """A plot of this run as a data URI: a relative path under plots/ ending .png, a regular
    file, bounded; anything else is named, not read (no file is embedded from data)."""
    from specc.files import UnreadableFile, read_bounded

    parts = Path(src).parts
    if (Path(src).is_absolute() or len(parts) != 2 or parts[0] != PLOTS_DIR
            or not src.endswith(".png") or ".." in parts):
        return f"<p>{_inline(f'![{alt}]({src})')}</p>"
    try:
        data = base64.b64encode(read_bounded(run_dir / src, PLOT_BYTES)).decode("ascii")
    except (OSError, UnreadableFile):
        return f"<p>plot {html.escape(alt)} missing ({html.escape(src)})</p>"
    return (f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(alt)}</figcaption></figure>")


def markdown_to_html(md: str, run_dir: Path) -> str:
    """The subset of markdown report.md uses: headings, pipe tables, lists, images, text."""
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            head, body = block[0], [b for b in block[1:] if not re.fullmatch(r"[|:\- ]+", b)]
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in _cells(head))
                       + "</tr>" + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>"
                                                            for c in _cells(b)) + "</tr>"
                                           for b in body) + "</table>")
            continue
        m = re.match(r"(#{1,6}) (.*)", line)
        if m:
            n = len(m.group(1))
            out.append(f"<h{n}>{_inline(m.group(2))}</h{n}>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif _IMG.fullmatch(line.strip()):
            m = _IMG.fullmatch(line.strip())
            assert m is not None   # matched just above
            out.append(_image(m.group(1), m.group(2), run_dir))
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
        i += 1
    return "\n".join(out)


def render_html(markdown: str, run_dir: Path, manifest: dict | None = None) -> str:
    """The whole page."""
    title = markdown.splitlines()[0].lstrip("# ") if markdown else "Report"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
             markdown_to_html(markdown, run_dir)]
    if manifest:
        parts.append("<h2>Provenance (manifest.json)</h2><pre>"
                     + html.escape(json.dumps(manifest, indent=2, default=str)) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"

"""The shell every HTML report shares: one self-contained file (inline CSS, inline JS, inline
SVG), no network access, and the pieces the pages are built from (cells, tables, sections).

Number cells carry their exact value in ``data-value`` (``repr`` of the float, ``NaN`` for
not-a-number, empty when there is no value) and a rounded text; the sort script orders by
``data-value``, and the browser tests compare ``data-value`` with the JSON the page was made from.
Tables with ``class="sortable"`` sort when a header is clicked (again: reverse); rows without a
value sort last either way.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from html import escape
from typing import Any, Sequence

CSS = """
:root{--fg:#1d2330;--muted:#535c69;--line:#d9dee5;--bg:#fff;--panel:#f5f7fa;--stripe:#fafbfc;--ok:#2f7d32;--bad:#b3261e;--warn:#8a5c00;--accent:#2b5f8f}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg);
  overflow-wrap:break-word;word-break:normal;hyphens:none}
header{padding:18px 28px 10px;border-bottom:1px solid var(--line);background:var(--panel)}
header h1{margin:0 0 4px;font-size:21px}
header .sub{color:var(--muted)}
main{padding:8px 28px 40px;max-width:1600px}
nav{margin:8px 0 0;font-size:13px}nav a{margin-right:14px;color:var(--accent);text-decoration:none;white-space:nowrap;display:inline-block}
section{margin-top:26px}
h2{font-size:17px;margin:0 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:14px;margin:14px 0 6px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-top:14px}
.card{border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:170px;max-width:100%;background:var(--bg)}
.card .label{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}.card .label .name{text-transform:none;letter-spacing:0}
.card .value{font-size:24px;font-weight:600;margin:2px 0}
.card .detail{color:var(--muted);font-size:12.5px}
.card.decision{border-width:2px}.card.decision.ok{border-color:var(--ok)}.card.decision.bad{border-color:var(--bad)}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff;background:var(--muted);white-space:nowrap}
.badge.complete,.badge.better,.badge.done,.badge.ok{background:var(--ok)}
.badge.failed,.badge.worse,.badge.interrupted{background:var(--bad)}
.badge.running,.badge.partial,.badge.mixed,.badge.cap{background:var(--warn)}
table{border-collapse:collapse;font-size:13px;margin:6px 0 4px}
caption{text-align:left;caption-side:bottom;padding-top:4px}
.scroll{max-width:100%;overflow-x:auto}
.stack{display:flex;flex-direction:column;gap:4px}.stack .ptitle{font-weight:600;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:var(--panel);font-weight:600;vertical-align:bottom}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th:after{content:"\\00a0\\2195";color:var(--muted)}
table.sortable th[aria-sort=ascending]:after{content:"\\00a0\\2191";color:var(--fg)}
table.sortable th[aria-sort=descending]:after{content:"\\00a0\\2193";color:var(--fg)}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.none{color:var(--muted);font-style:italic}
tbody tr:nth-child(even){background:var(--stripe)}
.note{color:var(--muted);font-size:12.5px;margin:4px 0}
.plots{display:flex;flex-wrap:wrap;gap:10px}
.plot-blocks{display:flex;flex-wrap:wrap;gap:6px 24px;align-items:flex-start}.plot-block{max-width:100%}
svg.plot{max-width:100%;height:auto;background:#fff;border:1px solid var(--line);border-radius:6px}
svg .axis{stroke:#333;stroke-width:1}svg .tick{stroke:#333}svg .grid{stroke:#eceff3}
svg .ticklabel{font-size:10px;fill:#444}svg .xlabel,svg .ylabel{font-size:11.5px;fill:#222}
svg .ptitle{font-size:12px;font-weight:600;fill:#222}svg .ci{stroke-width:1.6}svg .ref{stroke:#6b6b6b;stroke-dasharray:4 3}
svg .reflabel{font-size:10px;fill:#444}svg .empty{font-size:12px;fill:#535c69}
.legend{font-size:12px;color:var(--muted);margin:2px 0 6px}.legend .key{margin-right:12px;white-space:nowrap;display:inline-block}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.gallery{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;border:1px solid var(--line);border-radius:6px;padding:6px;background:var(--panel);max-width:100%}
figure video{display:block;width:256px;max-width:100%;max-height:256px;background:#000}
figcaption{font-size:12px;margin-top:4px}
dl.kv{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:3px 16px;margin:4px 0}
dl.kv dt{color:var(--muted)}dl.kv dd{margin:0;min-width:0}
pre{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:8px 10px;overflow:auto;max-height:360px;font-size:12px}
code{font-size:12.5px}
details summary{cursor:pointer;color:var(--accent)}
.bad{color:var(--bad)}.ok{color:var(--ok)}
@media (max-width:520px){
  svg.plot[data-wide] .ticklabel{font-size:14px}svg.plot[data-wide] .ticklabel.name{font-size:12px}svg.plot[data-wide] .reflabel{font-size:13px}
  svg.plot[data-wide] .xlabel,svg.plot[data-wide] .ylabel,svg.plot[data-wide] .ptitle,svg.plot[data-wide] .empty{font-size:15px}
}
@media (max-width:720px){
  header,main{padding-left:14px;padding-right:14px}
  dl.kv{grid-template-columns:minmax(0,1fr);gap:0}dl.kv dd{margin-bottom:6px}
  .scroll{overflow-x:visible}
  table.stacked,table.stacked tbody,table.stacked tr,table.stacked td{display:block;width:100%}
  table.stacked thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
  table.stacked tr{border:1px solid var(--line);border-radius:6px;margin:0 0 8px;padding:2px 0}
  table.stacked td{display:grid;grid-template-columns:minmax(0,42%) minmax(0,1fr);gap:8px;border-bottom:none;
    text-align:left;white-space:normal;padding:2px 8px}
  table.stacked td:before{content:attr(data-label);color:var(--muted);font-style:normal;font-weight:600}
  table.stacked td>*{justify-self:start}table.stacked caption{display:block}
}
"""

SORT_JS = """
(function(){
  function key(td){var v=td?td.getAttribute('data-value'):null;if(v===null)return {n:false,s:(td?td.textContent:'').trim().toLowerCase()};
    if(v===''||v==='NaN')return {none:true};var f=Number(v);return isNaN(f)?{n:false,s:v.toLowerCase()}:{n:true,f:f};}
  function sortBy(th){var table=th.closest('table'),body=table.tBodies[0],idx=Array.prototype.indexOf.call(th.parentNode.children,th);
    var dir=th.getAttribute('aria-sort')==='ascending'?-1:1;
    Array.prototype.forEach.call(th.parentNode.children,function(h){h.removeAttribute('aria-sort');});
    th.setAttribute('aria-sort',dir===1?'ascending':'descending');
    var rows=Array.prototype.slice.call(body.rows).map(function(r,i){return {r:r,i:i,k:key(r.cells[idx])};});
    rows.sort(function(a,b){if(a.k.none||b.k.none){return a.k.none&&b.k.none?a.i-b.i:(a.k.none?1:-1);}
      var c=(a.k.n&&b.k.n)?(a.k.f-b.k.f):String(a.k.n?a.k.f:a.k.s).localeCompare(String(b.k.n?b.k.f:b.k.s));return c?dir*c:a.i-b.i;});
    rows.forEach(function(x){body.appendChild(x.r);});}
  document.querySelectorAll('table.sortable th').forEach(function(th){th.tabIndex=0;
    th.addEventListener('click',function(){sortBy(th);});
    th.addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();sortBy(th);}});});
})();
"""


@dataclass(frozen=True)
class Cell:
    """One table cell: the text shown, and the exact value behind it (``None``: not a number)."""

    text: str
    value: Any = None
    css: str = ""
    html: bool = False
    """``text`` is HTML already (a link, a badge); otherwise it is escaped."""

    def render(self, label: str | None = None) -> str:
        """The ``<td>``; ``label`` (its column's header) is shown beside the value when a narrow
        screen stacks the table's rows (``data-label``)."""
        attrs = ""
        if self.value is not None:
            attrs = f' data-value="{escape(value_attr(self.value))}"'
        if label is not None:
            attrs += f' data-label="{escape(label)}"'
        cls = self.css or ("num" if isinstance(self.value, (int, float)) and not isinstance(self.value, bool) else "")
        cls_attr = f' class="{cls}"' if cls else ""
        return f"<td{cls_attr}{attrs}>{self.text if self.html else escape(self.text)}</td>"


def value_attr(value: Any) -> str:
    """The exact value as the page stores it: ``repr`` of a float (round-trips), ``NaN``, or text."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else repr(value)
    return str(value)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt(x: Any, digits: int = 1) -> str:
    """A number rounded for reading; ``—`` for none, ``NaN`` for not-a-number."""
    if x is None:
        return "—"
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def fmt_sig(x: Any, digits: int = 4) -> str:
    """A number to ``digits`` significant digits (e-values, p-values); ``—`` for none."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return "—" if x is None else str(x)
    return "NaN" if math.isnan(x) else f"{x:.{digits}g}"


def pnum(x: Any) -> Cell:
    """A p-value cell: 3 significant digits (``1.2e-06``, ``0.0113``), exact ``data-value``."""
    if x is None:
        return Cell("—", "", "num none")
    return Cell(fmt_sig(x, 3), float(x))


def fmt_interval(ci: Sequence[Any] | None, digits: int = 1) -> str:
    if not ci or len(ci) != 2 or ci[0] is None:
        return "—"
    return f"[{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def num(x: Any, digits: int = 1) -> Cell:
    """A number cell: rounded text, exact ``data-value``."""
    if x is None:
        return Cell("—", "", "num none")
    return Cell(fmt(x, digits), float(x) if isinstance(x, float) else x)


def interval(ci: Sequence[Any] | None, digits: int = 1) -> Cell:
    """An interval cell, sorted by its low end (exact bounds in ``data-low``/``data-high``)."""
    if not ci or ci[0] is None or not all(isinstance(v, (int, float)) for v in ci):
        return Cell("—", "", "num none")
    lo, hi = float(ci[0]), float(ci[1])
    return IntervalCell(fmt_interval(ci, digits), lo, "num", hi=hi)


@dataclass(frozen=True)
class IntervalCell(Cell):
    hi: float = math.nan

    def render(self, label: str | None = None) -> str:
        data_label = f' data-label="{escape(label)}"' if label is not None else ""
        return (f'<td class="num" data-value="{value_attr(self.value)}" data-low="{value_attr(self.value)}" '
                f'data-high="{value_attr(self.hi)}"{data_label}>{escape(self.text)}</td>')


def none(text: str) -> Cell:
    """A cell that says why there is no number (e.g. "no success signal"); sorts last."""
    return Cell(text, "", "none")


def text(value: Any) -> Cell:
    return Cell("" if value is None else str(value), None)


def link(label: str, href: str) -> Cell:
    return Cell(f'<a href="{escape(href)}">{escape(label)}</a>', label, html=True)


def badge(label: str, kind: str | None = None) -> str:
    return f'<span class="badge {escape((kind or label).replace(" ", "-"))}">{escape(label)}</span>'


def table(table_id: str, headers: Sequence[str], rows: Sequence[tuple[dict[str, Any], Sequence[Cell]]],
          sortable: bool = True, caption: str | None = None) -> str:
    """A table; each row is ``(attributes of the <tr>, cells)``. Attributes become ``data-*``.

    Wide screens see a table (headers wrap between words, never inside one); below 720 px each
    row becomes a block of ``header: value`` lines (``class="stacked"``), so no column of the
    answer is ever off-screen."""
    head = "".join(f'<th scope="col">{escape(h)}</th>' for h in headers)
    body = []
    for attrs, cells in rows:
        a = "".join(f' data-{escape(k)}="{escape(value_attr(v))}"' for k, v in attrs.items())
        body.append(f"<tr{a}>" + "".join(c.render(headers[i] if i < len(headers) else None) for i, c in enumerate(cells)) + "</tr>")
    cls = ' class="sortable stacked"' if sortable else ' class="stacked"'
    cap = f"<caption class=\"note\">{escape(caption)}</caption>" if caption else ""
    return (f'<div class="scroll"><table id="{escape(table_id)}"{cls}>{cap}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def kv(pairs: Sequence[tuple[str, Any]], html_values: bool = False) -> str:
    """A definition list of ``(key, value)``; ``None`` values read "not recorded"."""
    items = []
    for k, v in pairs:
        if v is None or v == "":
            shown = '<span class="note">not recorded</span>'
        else:
            shown = str(v) if html_values else escape(str(v))
        items.append(f"<dt>{escape(k)}</dt><dd>{shown}</dd>")
    return f'<dl class="kv">{"".join(items)}</dl>'


def card(label: str, value: str, detail: str = "", card_id: str | None = None, data: dict[str, Any] | None = None) -> str:
    ident = f' id="{escape(card_id)}"' if card_id else ""
    attrs = "".join(f' data-{escape(k)}="{escape(value_attr(v))}"' for k, v in (data or {}).items())
    return (f'<div class="card"{ident}{attrs}><div class="label">{escape(label)}</div><div class="value">{escape(value)}</div>'
            f'<div class="detail">{detail}</div></div>')


def section(section_id: str, title: str, body: str) -> str:
    return f'<section id="{escape(section_id)}"><h2>{escape(title)}</h2>{body}</section>'


def note(text_: str) -> str:
    return f'<p class="note">{escape(text_)}</p>'


def document(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]], kind: str) -> str:
    """The whole page: ``sections`` are ``(id, title, body html)``; empty bodies are left out."""
    shown = [(sid, t, b) for sid, t, b in sections if b]
    nav = "".join(f'<a href="#{escape(sid)}">{escape(t)}</a>' for sid, t, _ in shown)
    body = "".join(section(sid, t, b) for sid, t, b in shown)
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="generator" content="fasteval report ({escape(kind)})">'
            # no request leaves the page: not even a favicon
            '<link rel="icon" href="data:,">'
            f"<title>{escape(title)}</title><style>{CSS}</style></head>"
            f'<body data-report="{escape(kind)}"><header><h1>{escape(title)}</h1><div class="sub">{subtitle}</div>'
            f"<nav>{nav}</nav></header><main>{body}</main><script>{SORT_JS}</script></body></html>\n")


def relative_href(target: str | os.PathLike, page_dir: str | os.PathLike) -> str:
    """A link from a page in ``page_dir`` to ``target`` (relative, forward slashes, URL-quoted)."""
    from urllib.parse import quote

    rel = os.path.relpath(os.path.abspath(target), os.path.abspath(page_dir))
    return quote(rel.replace(os.sep, "/"))

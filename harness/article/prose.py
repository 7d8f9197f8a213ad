"""Presentation helpers for the notebooks: prose with numbers from data, styled tables, verbatim SQL.

Notebooks build sentences from measured values with these helpers, so no
measured number is ever typed into the article.
"""

from __future__ import annotations

import html
import textwrap

import pandas as pd
from IPython.display import HTML, Markdown, display

# The notebooks import the number formats from here; they are written once, in formats.
from harness.article.formats import count, missing, ms, number, percent, ratio  # noqa: F401
from harness.claims.strategies import STRATEGIES


def md(text: str) -> None:
    """Show a Markdown paragraph (dedented), typically an f-string over measured values."""
    display(Markdown(textwrap.dedent(text).strip()))


def show_html(text: str) -> None:
    display(HTML(text))


def words(n: int) -> str:
    """Small counts as words, as prose writes them."""
    names = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
    return names[n] if 0 <= n < len(names) else f"{n:,}"


def join(items) -> str:
    items = [str(i) for i in items]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def table(frame: pd.DataFrame, caption: str | None = None, formats: dict | None = None,
          css_class: str = "", escape: bool = True) -> str:
    """An HTML table: numbers right-aligned, formatted per column (a callable each), optional caption."""
    formats = formats or {}
    head = "".join(
        f'<th class="{"number" if _is_numeric(frame[c]) else ""}">{html.escape(str(c))}</th>' for c in frame.columns)
    rows = []
    for _, row in frame.iterrows():
        cells = []
        for column in frame.columns:
            value = row[column]
            text = formats[column](value) if column in formats else ("" if missing(value) else str(value))
            numeric = _is_numeric(frame[column])
            cells.append(f'<td class="{"number" if numeric else ""}">{html.escape(text) if escape else text}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    caption_html = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return (f'<table class="{css_class}">{caption_html}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _is_numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def plan_block(plan_text: str) -> str:
    """A text EXPLAIN plan as a preformatted block that keeps its columns (it scrolls rather than wraps)."""
    return f'<pre class="plan">{html.escape(plan_text or "")}</pre>'


def times(n) -> str:
    """'not once', 'once', 'twice', '3 times'"""
    n = int(n)
    return {0: "not once", 1: "once", 2: "twice"}.get(n, f"{n:,} times")


def strategy_sql(name: str) -> str:
    """A strategy's statements exactly as harness.claims.strategies holds them, as a Markdown SQL block."""
    strategy = STRATEGIES[name]
    return f"```sql\n{strategy.sql}\n```"


def counted(n: int, word: str) -> str:
    """'one race', 'three races': a small count in words with its noun."""
    return f"{words(int(n))} {word}{'' if int(n) == 1 else 's'}"


def change(before: float, after: float, slower: str, faster: str) -> str:
    """The phrase for a rate that fell (`slower`) or rose (`faster`), with {factor} filled in (e.g. "2.1x")."""
    if missing(before) or missing(after) or not before or not after:
        return "not measured"
    return (slower if after < before else faster).format(factor=ratio(max(before, after) / min(before, after)))


# --------------------------------------------------------------------------- figures in sentences

def listing(pairs, fmt) -> str:
    """'0.98 at 2 workers, 2.2 at 4, 18.9 at 100'"""
    parts = [f"{fmt(value)} at {w}" for w, value in pairs]
    if parts:
        parts[0] += " workers" if pairs[0][0] != 1 else " worker"
    return ", ".join(parts)


def numbered(n: int, noun: str) -> str:
    """'1 worker', '4 workers', '3 races'"""
    return f"{count(n)} {noun}{'' if n == 1 else 's'}"


def workers_phrase(n: int) -> str:
    return numbered(n, "worker")


def worker_list(counts) -> str:
    counts = sorted(int(w) for w in counts)
    return ", ".join(str(w) for w in counts[:-1]) + (" and " if len(counts) > 1 else "") + str(counts[-1])


def cpu_bound_shown(bound) -> str:
    """For a finding whose figures include CPU-bound points (it does not judge contention there): which they are."""
    if not bound:
        return ""
    return f"{worker_list(bound)} workers: CPU-bound here."


def cpu_bound_note(bound) -> str:
    """Which worker counts a verdict leaves out because they were CPU-bound, and why; '' when none."""
    if not bound:
        return ""
    return f"Not judged at {worker_list(bound)} workers: CPU-bound here."

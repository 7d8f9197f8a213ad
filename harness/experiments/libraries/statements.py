"""The statements the server logged for a library's database (log_statement = all on it alone): read back from its
log as each backend sent them, with their bound parameters, and the jobs a statement's parameter names. What a drain
keeps of a library's statements, and what a fault run and the stale-completion probe count as its completions."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

LOG_ENTRY = re.compile(r"^\S+ \S+ \S+ \[\d+\] ")  # a new entry of the server's log (its default line prefix)
LOG_LINE = re.compile(LOG_ENTRY.pattern + r"(?:\S+ )?LOG:  (?:statement|execute [^:]*):")
LOG_PARAMETERS = re.compile(LOG_ENTRY.pattern + r"(?:\S+ )?DETAIL:  parameters: ")  # a statement's values
LOG_PID = re.compile(r"\[(\d+)\]")  # the backend's pid in an entry's prefix
# a literal, as ?: a quoted string or a number, not a placeholder's ($1)
LITERAL = re.compile(r"'(?:[^']|'')*'|(?<![$\w])\d+(?:\.\d+)?\b")


def statement_entries(log: Path, since: int, until: int | None = None) -> list[tuple[int, str]]:
    """The statements the server logged between bytes `since` and `until` of its log (log_statement = all on the
    library's database only): each backend's pid and the statement as sent, its whitespace runs read as one space."""
    return [(pid, text) for pid, text, _ in logged_statements(log, since, until)]


def logged_statements(log: Path, since: int, until: int | None = None) -> list[tuple[int, str, str]]:
    """As statement_entries, with each statement's bound parameters as the server logged them on the entry's
    DETAIL line ("$1 = '5', $2 = '{...}'"; empty for a statement sent with its values inline)."""
    with open(log, "rb") as f:
        f.seek(since)
        text = f.read(None if until is None else max(0, until - since)).decode("utf-8", "replace")
    statements, current = [], None
    for line in text.splitlines():
        if LOG_ENTRY.match(line):
            detail = LOG_PARAMETERS.match(line)
            if detail and current is not None and current[0] == int(LOG_PID.search(line).group(1)):
                current[2].append(line[detail.end():].strip())
                continue
            if current is not None:
                statements.append(current)
            match = LOG_LINE.match(line)
            current = (int(LOG_PID.search(line).group(1)), [line[match.end():].strip()], []) if match else None
        elif current is not None:  # a statement, or its parameters, over several lines
            (current[2] or current[1]).append(line.strip())
    if current is not None:
        statements.append(current)
    return [(pid, " ".join(" ".join(parts).split()), " ".join(values)) for pid, parts, values in statements]


PARAMETER = re.compile(r"\$(\d+) = (NULL|'(?:[^']|'')*')")  # one bound value on a DETAIL line


def named_jobs(parameters: str, which: str, keys: dict[str, int]) -> list[int]:
    """The jobs a statement's parameter `which` ($2) names, as the audit counts them: a value, or an array of them
    ('{1,2}'); a value that names no enqueued job is left out."""
    values = {f"${n}": value for n, value in PARAMETER.findall(parameters)}
    value = values.get(which, "NULL")
    if value == "NULL":
        return []
    text = value[1:-1].replace("''", "'")
    items = text[1:-1].split(",") if text.startswith("{") and text.endswith("}") else [text]
    return [keys[item.strip().strip('"')] for item in items if item.strip().strip('"') in keys]


def names_only_others(parameters: str, which: str, keys: dict[str, int], job: int) -> bool:
    """Whether a statement's parameter `which` is there and names jobs, none of them `job`: a job read in keys, or
    one enqueued after them (a periodic task's); False where the parameter is not there or names `job`."""
    there = dict(PARAMETER.findall(parameters)).get(which.lstrip("$"), "NULL") != "NULL"
    return there and job not in named_jobs(parameters, which, keys)


def statements_logged(log: Path | None, since: int | None) -> pd.DataFrame | None:
    """The statements the server logged after byte `since` of its log (log_statement = all on the library's
    database only), each as sent with its literals as ?, and how often: what the library sent, captured; None
    without a log here."""
    if log is None or since is None or not log.exists():
        return None
    statements = [text for _, text in statement_entries(log, since)]
    shapes = pd.Series([LITERAL.sub("?", s) for s in statements], dtype=object)
    counted = shapes.value_counts(sort=False)
    return pd.DataFrame({"statement": counted.index.astype(str), "calls": counted.to_numpy(dtype="int64")},
                        columns=["statement", "calls"])

"""`make report`: ensure the data, execute the notebooks, render report/index.html.

    python -m harness.report [--params notebooks/params/report.yml] [--force]

1. data: for each section of the params file (harness.experiments.registry
   knows which kind of experiment each one asks for), reuse the runs already
   stored for the same parameters and run the harness (progress bars) for
   what is missing;
2. notebooks: execute each numbered notebook with papermill into report/,
   handing it the run folders of the sections it reads (its `runs`
   parameter), skipped when its inputs (notebook, the runs it reads, the
   harness code) are unchanged since the last build;
3. html: render the article notebook with the offline template
   (harness/article/templates/claimrace) into report/index.html.

Phase timings go to report/build-timings.json (the latest build) and report/build-history.jsonl (every build).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

from harness import config
from harness.entry import OneLineParser, run_command
from harness.errors import UserError
from harness.experiments import registry
from harness.storage import git_commit, utc_now

DEFAULT_PARAMS = config.PARAMS_FILE
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "claimrace"
ARTICLE = "04-article.ipynb"
KERNEL_NAME = "python3"  # the kernel of the Python running this (ipykernel's native kernel)
STATE_FILE = ".build-state.json"

# Which params-file sections each notebook reads: it is handed their run folders.
NOTEBOOK_SECTIONS: dict[str, tuple[str, ...]] = {
    "01-races.ipynb": ("races",),
    "02-plans.ipynb": ("plans",),
    "03-churn.ipynb": ("churn",),
    ARTICLE: tuple(registry.SECTIONS),
}


def notebook_parameters(notebook: str, runs: dict[str, list[Path]], params_file: Path, data_dir: Path) -> dict:
    """The papermill parameters of one notebook: the run folders it reads, and where they came from."""
    return {"runs": {section: [str(path) for path in runs[section]] for section in NOTEBOOK_SECTIONS[notebook]},
            "params_file": str(Path(params_file).resolve()), "data_dir": str(Path(data_dir).resolve())}


# --------------------------------------------------------------------------- timing and caching


class Timings:
    def __init__(self):
        self.phases: dict[str, dict] = {}
        self.started = time.monotonic()

    @contextmanager
    def phase(self, name: str, **details):
        began = time.monotonic()
        entry = {"seconds": None, **details}
        self.phases[name] = entry
        try:
            yield entry
        finally:
            entry["seconds"] = round(time.monotonic() - began, 3)

    def as_dict(self) -> dict:
        return {"finished_at": utc_now(), "total_seconds": round(time.monotonic() - self.started, 3),
                "cpu_count": os.cpu_count(), "phases": self.phases}


def _code_digest() -> str:
    """The harness code and templates: a change in either re-executes the notebooks."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent  # the whole harness package
    for path in sorted([*root.rglob("*.py"), *TEMPLATE_DIR.rglob("*")]):
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def inputs_digest(notebook_path: Path, runs: dict[str, list], code_digest: str) -> str:
    """The notebook, which runs it reads (a run's folder name is unique and its contents never change) and the code."""
    digest = hashlib.sha256()
    digest.update(Path(notebook_path).read_bytes())
    digest.update(json.dumps({section: [Path(p).name for p in paths] for section, paths in runs.items()},
                             sort_keys=True).encode())
    digest.update(code_digest.encode())
    return digest.hexdigest()


def _read_state(report_dir: Path) -> dict:
    try:
        return json.loads((report_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def _write_state(report_dir: Path, state: dict) -> None:
    (report_dir / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------- the phases


def ensure_data(params: dict, data_dir: Path, timings: Timings, db: str | None = None,
                progress: bool = True, sections=registry.SECTIONS) -> dict[str, list[Path]]:
    """Every section's runs (or those of `sections`), reused or run now; returns the run folders of each section."""
    runs: dict[str, list[Path]] = {}
    for section in sections:
        with timings.phase(section) as entry:
            runs[section], made = registry.ensure_section(params, section, data_dir, db, progress)
            entry.update(runs=len(runs[section]), runs_made=made)
    return runs


def execute_notebooks(params_file: Path, runs: dict[str, list[Path]], data_dir: Path, report_dir: Path,
                      timings: Timings, force: bool = False, progress: bool = True,
                      notebook_dir: Path = config.NOTEBOOK_DIR) -> dict[str, bool]:
    """papermill each notebook into report_dir unless its inputs are unchanged; returns {name: executed}."""
    import papermill

    state = _read_state(report_dir)
    code = _code_digest()
    executed = {}
    with timings.phase("notebooks") as entry:
        for notebook in NOTEBOOK_SECTIONS:
            source = notebook_dir / notebook
            if not source.exists():
                raise UserError(f"notebook {source} is missing")
            parameters = notebook_parameters(notebook, runs, params_file, data_dir)
            digest = inputs_digest(source, parameters["runs"], code)
            target = report_dir / notebook
            if not force and target.exists() and state.get(notebook) == digest:
                executed[notebook] = False
                if progress:
                    print(f"notebooks: {notebook} unchanged since the last build, kept", flush=True)
                continue
            began = time.monotonic()
            if progress:
                print(f"notebooks: executing {notebook}", flush=True)
            state.pop(notebook, None)
            _write_state(report_dir, state)
            try:
                papermill.execute_notebook(str(source), str(target), parameters=parameters, kernel_name=KERNEL_NAME,
                                           cwd=str(notebook_dir), progress_bar=progress, log_output=False)
            except papermill.PapermillExecutionError as exc:
                raise UserError(f"{notebook} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue} "
                                f"(the executed notebook is {target})") from None
            state[notebook] = digest
            _write_state(report_dir, state)
            executed[notebook] = True
            entry[notebook] = round(time.monotonic() - began, 3)
        entry["executed"] = [n for n, ran in executed.items() if ran]
    return executed


def render_article(executed_article: Path, html_path: Path, colophon: str = "") -> Path:
    """The executed article as one offline page: no code, no prompts, the vega bundle inlined once."""
    import nbformat
    from bs4 import BeautifulSoup
    from nbconvert import HTMLExporter

    from harness.article import glue, vega

    notebook = glue.fill(nbformat.read(executed_article, as_version=4), executed_article.name)
    exporter = HTMLExporter(template_name=TEMPLATE_NAME, extra_template_basedirs=[str(TEMPLATE_DIR)],
                            exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True,
                            anchor_link_text="")
    resources = {"vega_embed_bundle": vega.javascript_bundle(), "colophon": colophon,
                 "description": notebook.metadata.get("description", "")}
    body, _ = exporter.from_notebook_node(notebook, resources=resources)
    html_path.write_text(link_repeated_notes(add_table_of_contents(body, BeautifulSoup), BeautifulSoup))
    return html_path


def _sentences(text: str) -> list[str]:
    """A note's sentences (and clauses after a semicolon or colon) of at least six words, backticks dropped (the
    page prints them as code)."""
    parts = re.split(r"(?<=[.;:])\s+", " ".join(text.replace("`", "").split()))
    return [part.rstrip(".;:") for part in parts if len(part.split()) >= 6]


def link_repeated_notes(html: str, soup_class) -> str:
    """In the notes table (summary.NOTES_CLASS), a note whose every sentence the page prints elsewhere becomes a
    link to its finding's section, the link its id already carries, and a note word for word an earlier finding's
    says so: no note is printed twice."""
    from harness.article.sections import summary

    soup = soup_class(html, "html.parser")
    notes = soup.find("table", class_=summary.NOTES_CLASS)
    if notes is None:
        return html
    marker = soup.new_tag("span")
    notes.replace_with(marker)
    elsewhere = " ".join(" ".join(text.split()) for text in soup.find_all(string=True)
                         if text.parent.name not in ("script", "style"))
    marker.replace_with(notes)
    first = {}  # a note's text: the finding that printed it first in the table
    for row in notes.find_all("tr")[1:]:
        finding, _, note = row.find_all("td")
        text = " ".join(note.get_text(" ").split())
        link, said = finding.find("a"), _sentences(text)
        if link is not None and said and all(sentence in elsewhere for sentence in said):
            note.clear()
            replacement = soup.new_tag("a", href=link["href"])
            replacement.string = summary.note_in_section()
            note.append(replacement)
        elif text in first:  # word for word an earlier finding's note
            note.string = summary.note_same_as(first[text])
        else:
            first[text] = finding.get_text(strip=True)
    return str(soup)


def add_table_of_contents(html: str, soup_class) -> str:
    """Fill <nav class="toc"></nav> with links to the article's second-level headings."""
    if 'class="toc"' not in html:
        return html
    soup = soup_class(html, "html.parser")
    nav = soup.find("nav", class_="toc")
    headings = [h for h in soup.find_all("h2") if h.get("id")]
    title = soup.new_tag("strong")
    title.string = "Contents"
    listing = soup.new_tag("ol")
    for heading in headings:
        item = soup.new_tag("li")
        link = soup.new_tag("a", href=f"#{heading['id']}")
        link.string = heading.get_text(" ", strip=True)
        item.append(link)
        listing.append(item)
    nav.clear()
    nav.append(title)
    nav.append(listing)
    return str(soup)


def stored_run_count(runs: dict[str, list[Path]]) -> int:
    """The stored runs the page reads, each folder once: sections may share runs (the unindexed indexed_race drains
    are client_layouts' processes runs, full.yml's original_size is the sweep's own)."""
    return len({Path(path).resolve() for paths in runs.values() for path in paths})


def _colophon(runs: dict[str, list[Path]]) -> str:
    commit = git_commit()
    total = stored_run_count(runs)
    where = f"git commit {commit['commit'][:10]}{' with local changes' if commit['dirty'] else ''}" \
        if commit.get("commit") else "a tree outside git"
    return (f"Built {utc_now()[:16].replace('T', ' ')} UTC by <code>make report</code> from {where}, "
            f"reading {total} stored runs. The executed notebooks, with their code, sit beside this page.")


def build(params_path: Path = DEFAULT_PARAMS, data_dir: Path = config.DATA_DIR,
          report_dir: Path = config.REPORT_DIR, db: str | None = None, force: bool = False,
          progress: bool = True) -> Path:
    """The whole pipeline; returns the path of index.html."""
    params = registry.load_params(params_path)
    data_dir = Path(data_dir).resolve()
    report_dir = Path(report_dir).resolve()
    report_dir.mkdir(parents=True, exist_ok=True)
    timings = Timings()
    runs = ensure_data(params, data_dir, timings, db, progress)
    executed = execute_notebooks(params_path, runs, data_dir, report_dir, timings, force, progress)
    html_path = report_dir / "index.html"
    with timings.phase("html") as entry:
        if executed.get(ARTICLE) or force or not html_path.exists():
            render_article(report_dir / ARTICLE, html_path, _colophon(runs))
            entry["rendered"] = True
        else:
            entry["rendered"] = False
        entry["bytes"] = html_path.stat().st_size
    result = timings.as_dict()
    result["params"] = str(Path(params_path).resolve())
    (report_dir / "build-timings.json").write_text(json.dumps(result, indent=2) + "\n")
    # one line per build, so a cached rebuild does not hide what the full build cost
    with open(report_dir / "build-history.jsonl", "a") as history:
        history.write(json.dumps(result) + "\n")
    if progress:
        phases = ", ".join(f"{name} {entry['seconds']:.1f} s" for name, entry in result["phases"].items())
        print(f"wrote {html_path} ({html_path.stat().st_size / 1e6:.1f} MB) in {result['total_seconds']:.0f} s "
              f"({phases})", flush=True)
    return html_path


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m harness.report", description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=DEFAULT_PARAMS, help="the sweeps, as YAML (default %(default)s)")
    parser.add_argument("--data-dir", type=Path, default=config.DATA_DIR, help="where runs are stored and looked up")
    parser.add_argument("--report-dir", type=Path, default=config.REPORT_DIR, help="where the article goes")
    parser.add_argument("--db", choices=("embedded", "docker", "url"), default=None,
                        help="where the server comes from (default: DATABASE_URL if set, else embedded)")
    parser.add_argument("--force", action="store_true", help="re-execute every notebook even if nothing changed")
    parser.add_argument("--quiet", action="store_true", help="no progress output")

    def build_from_arguments() -> int:
        args = parser.parse_args(argv)
        build(args.params, args.data_dir, args.report_dir, args.db, args.force, not args.quiet)
        return 0

    return run_command(build_from_arguments)


if __name__ == "__main__":
    raise SystemExit(main())

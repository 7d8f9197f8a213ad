"""Every kind of experiment, and the one way runs of any kind are found, made and stored.

A kind lives in its folder, experiments/<kind>/: one frozen parameters
dataclass, one measure function, and its KIND (harness.experiments.contract.Kind),
which adds what the command line and the report need: the subcommand's help and
output, the params-file sections it serves, and what a run asks of the machine.
KINDS below lists them. The CLI (harness.cli) builds a subcommand per entry, the
report (harness.article.build) a data section per params-file section, and both
run experiments through `measure` and `ensure` here.

    ensure(kind, parameters, data_dir, db, pg_version, progress) -> list[Path]
        the stored runs for these parameters (one set, a list, or a sweep), made now where missing
    measure(kind, parameters, ...) -> list[Path]      every run made now
    ensure_sections(params_file, data_dir, sections) -> {section: [run folder, ...]}
        what a notebook reads, from the report's params file
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from tqdm.auto import tqdm

from harness import config, storage
from harness.errors import UserError
from harness.experiments.bench import measure as bench
from harness.experiments.churn import measure as churn
from harness.experiments.contract import Kind, Parameters, implied_settings
from harness.experiments.faults import measure as faults
from harness.experiments.libraries import faults as library_faults
from harness.experiments.libraries import wakeups
from harness.experiments.limits import server_on_this_machine
from harness.experiments.plans import measure as plans
from harness.experiments.production import measure as production
from harness.experiments.race import trials as race_trials
from harness.experiments.soak import sweep as soak_sweep
from harness.server import database, pooler, schema


KINDS: dict[str, Kind] = {entry.name: entry for entry in (
    race_trials.KIND, plans.KIND, churn.KIND, bench.KIND, production.KIND, faults.KIND, library_faults.KIND,
    wakeups.KIND, soak_sweep.KIND,
)}

for _entry in KINDS.values():  # the store reads every kind's runs back through these
    storage.declare_kind(_entry.name, _entry.parameters, _entry.summarise)

# The report's params-file sections, each with the kind whose runs it asks for.
SECTIONS: dict[str, str] = {section: entry.name for entry in KINDS.values() for section in entry.sections}


def kind(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"no kind of experiment named {name!r} (known: {', '.join(KINDS)})") from None


def parameter_sets(kind_name: str, parameters) -> list:
    """One run's parameters per run: from one set, a list of sets, or what the kind asks (a race sweep)."""
    entry = kind(kind_name)
    if isinstance(parameters, entry.parameters):
        return [parameters]
    if isinstance(parameters, entry.asks):
        return entry.runs(parameters)
    if isinstance(parameters, (list, tuple)) and all(isinstance(p, entry.parameters) for p in parameters):
        return list(parameters)
    raise TypeError(f"{kind_name} runs take {entry.parameters.__name__} or {entry.asks.__name__}, "
                    f"not {type(parameters).__name__}")


def _say(message: str, progress: bool) -> None:
    if progress:
        print(message, flush=True)


# --------------------------------------------------------------------------- finding, measuring, ensuring


def find(kind_name: str, parameters, data_dir: Path = config.DATA_DIR,
         pg_version: int = config.DEFAULT_PG_VERSION) -> tuple[list[Path | None], list]:
    """(the newest stored run per parameter set, None where there is none; the sets without one)."""
    found, missing = [], []
    for one in parameter_sets(kind_name, parameters):
        runs = storage.find_runs(kind_name, dataclasses.asdict(one), data_dir, pg_version, implied_settings(one))
        found.append(runs[-1] if runs else None)
        if not runs:
            missing.append(one)
    return found, missing


def measure(kind_name: str, parameters, data_dir: Path = config.DATA_DIR, db: str | database.Database | None = None,
            pg_version: int = config.DEFAULT_PG_VERSION, progress: bool = True) -> list[Path]:
    """Make and store one run per parameter set, all on one server; returns their folders in order.

    db: an open database.Database, or where to get a server from (None, "embedded", "docker", "url").
    """
    entry = kind(kind_name)
    sets = parameter_sets(kind_name, parameters)
    if not sets:
        return []
    asked_storage = [entry.storage(one) if entry.storage is not None else "tmpfs" for one in sets]
    if len(set(asked_storage)) > 1:  # one server per storage, the runs handed back in the sets' order
        made: dict[int, Path] = {}
        for where in dict.fromkeys(asked_storage):
            group = [i for i, asked in enumerate(asked_storage) if asked == where]
            made |= dict(zip(group, measure(kind_name, [sets[i] for i in group], data_dir, db, pg_version,
                                            progress)))
        return [made[i] for i in range(len(sets))]
    data_dir = storage.ensure_writable(Path(data_dir))
    open_handle = db if isinstance(db, database.Database) else None
    if open_handle is not None and asked_storage[0] != open_handle.details.get("storage", "tmpfs"):
        raise UserError(f"{kind_name} asked for storage {asked_storage[0]}, and the server given keeps its data on "
                        f"{open_handle.details.get('storage', 'its own storage')}")
    local = open_handle.source != "url" if open_handle is not None else server_on_this_machine(db)
    if entry.check_size is not None:  # before any server or process starts
        entry.check_size(sets, local, open_handle.pg_version if open_handle is not None else pg_version)
    workers = max(entry.workers(one) for one in sets)
    if open_handle is not None:
        return _measure_on(open_handle, entry, sets, workers, data_dir, progress)
    with database.open_database(db, pg_version, workers + config.HARNESS_CONNECTIONS + 10,
                                storage=asked_storage[0]) as handle:
        return _measure_on(handle, entry, sets, workers, data_dir, progress)


def _measure_on(handle: database.Database, entry: Kind, sets: list, workers: int, data_dir: Path,
                progress: bool) -> list[Path]:
    stored = []
    with handle.connect() as conn:
        schema.ensure_schema(conn)
        schema.acquire_run_lock(conn)  # held for every run of the batch; released when conn closes
        database.check_capacity(conn, workers)
        server = database.describe(handle, conn)
        client = storage.client_facts()
        sweep = len(sets) > 1
        bar = tqdm(sets, desc=entry.name, unit="run", disable=not (progress and sweep))
        for one in bar:
            if entry.label is not None:
                bar.set_postfix_str(entry.label(one))
            run_id = storage.new_run_id(entry.name)
            started_at = storage.utc_now()
            measured = entry.measure(handle, one, run_id, progress and not sweep)
            stored.append(storage.write_run(
                data_dir, kind=entry.name, run_id=run_id, started_at=started_at, parameters=dataclasses.asdict(one),
                server=server, client=client, procedure=measured.procedure, checks=measured.checks,
                results=measured.results, tables=measured.tables))
    return stored


def ensure(kind_name: str, parameters, data_dir: Path = config.DATA_DIR, db: str | database.Database | None = None,
           pg_version: int = config.DEFAULT_PG_VERSION, progress: bool = True) -> list[Path]:
    """The stored runs for these parameters, in order: reused from data_dir, or made now where missing."""
    return _ensure(kind_name, parameters, data_dir, db, pg_version, progress)[0]


def _ensure(kind_name, parameters, data_dir, db, pg_version, progress) -> tuple[list[Path], int]:
    """ensure(), and how many runs it made."""
    data_dir = Path(data_dir)
    found, missing = find(kind_name, parameters, data_dir, pg_version)
    if len(found) == 1:
        _say(f"{kind_name}: no stored run for these parameters in {data_dir}; running it" if missing
             else f"{kind_name}: found the stored run for these parameters in {data_dir}", progress)
    elif not missing:
        _say(f"{kind_name}: all {len(found)} runs found in {data_dir}", progress)
    else:
        _say(f"{kind_name}: {len(found) - len(missing)} of {len(found)} runs found in {data_dir}; "
             f"running the other {len(missing)}", progress)
    made_now = 0
    if missing:
        made = iter(measure(kind_name, missing, data_dir, db, pg_version, progress))
        found = [path if path is not None else next(made) for path in found]
        made_now = len(missing)
    followed, made_later = _follow_ups(kind_name, parameters, found, data_dir, pg_version,
                                       lambda sets: measure(kind_name, sets, data_dir, db, pg_version, progress))
    return found + followed, made_now + made_later


MAX_FOLLOW_UPS = 1000  # a guard: a follow_up that keeps asking is a bug, not a long build


def _follow_ups(kind_name: str, request, paths: list, data_dir: Path, pg_version: int,
                make=None) -> tuple[list[Path], int]:
    """The runs a kind's follow_up asks for after `paths` (found stored, else made with `make`, or the loop stops
    at the first one missing when `make` is None), and how many were made."""
    entry = kind(kind_name)
    if entry.follow_up is None or entry.request is None or not isinstance(request, entry.request):
        return [], 0
    summaries = [run.summary for run in storage.open_runs(path for path in paths if path is not None)]
    followed, made = [], 0
    for _ in range(MAX_FOLLOW_UPS):
        wanted = entry.follow_up(request, summaries)
        if not wanted:
            break
        found, missing = find(kind_name, wanted, data_dir, pg_version)
        if missing:
            if make is None:
                break
            fresh = iter(make(missing))
            found = [path if path is not None else next(fresh) for path in found]
            made += len(missing)
        followed += found
        summaries += [run.summary for run in storage.open_runs(found)]
    else:
        raise RuntimeError(f"{kind_name}: follow-up runs kept being asked for after {MAX_FOLLOW_UPS}")
    return followed, made


@dataclass(frozen=True)
class Asked:
    """One params-file section as the article reads it: what it asked for, and the stored runs that answer it (in
    the request's order; a run that could not be made, e.g. without pgbouncer, is absent)."""

    section: str
    request: Parameters  # the section's dataclass: a sweep, or one run's parameters
    runs: tuple  # storage.Run, one per stored run

    @property
    def paths(self) -> list[Path]:
        return [run.path for run in self.runs]


def asked(section: str, request: Parameters, paths) -> Asked:
    """A section's request with its stored runs (folders or Runs)."""
    return Asked(section, request, tuple(storage.open_runs(path for path in paths if path is not None)))


# --------------------------------------------------------------------------- the report's params file


def load_params(path: Path = config.PARAMS_FILE) -> dict:
    """The report's params file, every section checked (one line for anything wrong)."""
    path = Path(path)
    try:
        params = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise UserError(f"cannot read the parameters file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(params, dict):
        raise UserError(f"{path} must be a mapping of sections")
    missing = [s for s in SECTIONS if not isinstance(params.get(s), dict)]
    if missing:
        raise UserError(f"{path} lacks the section(s) {', '.join(missing)}")
    unknown = [key for key in params if key not in (*SECTIONS, "pg_version")]
    if unknown:
        raise UserError(f"{path}: unknown section {unknown[0]!r} (known: pg_version, {', '.join(SECTIONS)})")
    params.setdefault("pg_version", config.DEFAULT_PG_VERSION)
    _check_pg_version(params["pg_version"], f"{path}: pg_version")
    for section in SECTIONS:
        where = f"{path}: {section}"
        if SECTION_PG_VERSION in params[section]:
            _check_pg_version(params[section][SECTION_PG_VERSION], f"{where}: pg_version")
        section_request(params, section, where=where)  # every typo fails here, before anything runs
    return params


# A section may name its own server major version; the file's top-level pg_version is the default of every section.
SECTION_PG_VERSION = "pg_version"


def _check_pg_version(value, where: str) -> None:
    if isinstance(value, bool) or value not in config.SUPPORTED_PG_VERSIONS:
        raise UserError(f"{where} must be one of {config.SUPPORTED_PG_VERSIONS}, not {value!r}")


def section_pg_version(params: dict, section: str) -> int:
    """The server major version a section's runs are made on and found by: its own, else the file's."""
    return int(params[section].get(SECTION_PG_VERSION, params.get("pg_version", config.DEFAULT_PG_VERSION)))


def section_request(params: dict, section: str, where: str | None = None) -> Parameters:
    """A params-file section as its kind's dataclass (a race sweep, or one run's parameters)."""
    settings = {key: value for key, value in params[section].items() if key != SECTION_PG_VERSION}
    return kind(SECTIONS[section]).asks.from_mapping(settings, where or section)


def ensure_section(params: dict, section: str, data_dir: Path = config.DATA_DIR, db=None,
                   progress: bool = True) -> tuple[list[Path], int]:
    """A section's stored runs (made where missing, on a server of the section's major version), and how many
    were made now. A section with its own version needs a server the harness starts: a DATABASE_URL server
    is the one version it is."""
    request = section_request(params, section)
    if any(mode != "none" for mode in getattr(request, "poolers", ())) and pooler.binary() is None:
        found, missing = find(SECTIONS[section], request, Path(data_dir), section_pg_version(params, section))
        if missing:  # what is stored is still read; what is missing cannot be made here
            print(f"{section}: {len(missing)} of {len(found)} runs not made: pgbouncer not found "
                  f"({pooler.INSTALL_HINT})", file=sys.stderr)
            return [path for path in found if path is not None], 0
    entry = kind(SECTIONS[section])
    embedded = db == "embedded" or (db is None and not os.environ.get("DATABASE_URL"))
    if entry.storage is not None and not embedded:  # a disk is asked of the embedded server only
        sets = parameter_sets(entry.name, request)
        on_disk = [one for one in sets if entry.storage(one) != "tmpfs"]
        if on_disk:
            found, missing = find(entry.name, on_disk, Path(data_dir), section_pg_version(params, section))
            if missing:
                print(f"{section}: {len(missing)} of {len(on_disk)} runs on a disk not made: the server is not "
                      "started here (unset DATABASE_URL for the embedded one)", file=sys.stderr)
            paths, made = _ensure(entry.name, [one for one in sets if entry.storage(one) == "tmpfs"], data_dir, db,
                                  section_pg_version(params, section), progress)
            return paths + [path for path in found if path is not None], made
    own = SECTION_PG_VERSION in params[section] and section_pg_version(params, section) != params.get("pg_version")
    if own and (db == "url" or (db is None and os.environ.get("DATABASE_URL"))):
        _, missing = find(SECTIONS[section], section_request(params, section), Path(data_dir),
                              section_pg_version(params, section))
        if missing:
            raise UserError(f"section {section} runs on PostgreSQL {section_pg_version(params, section)}, which a "
                            "DATABASE_URL server cannot be: unset DATABASE_URL (the harness then starts each "
                            "version) or remove the section's pg_version")
    return _ensure(SECTIONS[section], section_request(params, section), data_dir, db,
                   section_pg_version(params, section), progress)


def notebook_runs(runs: dict | None, params_file, data_dir, sections=None,
                  changes: dict[str, dict] | None = None) -> dict[str, Asked]:
    """What a notebook reads, {section: Asked}: the run folders handed to it (make report), else its params file's
    sections with its parameters' changes (registry.overrides), found or made."""
    if runs and changes:
        raise UserError("give either the run folders (runs) or sweep values, not both: the runs were made for "
                        "the params file's values")
    return asked_sections(runs or ensure_sections(params_file, data_dir, sections, changes=changes), params_file,
                          changes)


def stored_sections(params: dict, data_dir: Path = config.DATA_DIR) -> dict[str, Asked]:
    """Every section of a params file with its stored runs, nothing made: a section with a run missing has only
    the runs it has."""
    requests = {section: section_request(params, section) for section in SECTIONS}
    stored = {}
    for section, request in requests.items():
        version = section_pg_version(params, section)
        found = find(SECTIONS[section], request, Path(data_dir), version)[0]
        followed = _follow_ups(SECTIONS[section], request, found, Path(data_dir), version)[0]
        stored[section] = asked(section, request, found + followed)
    return stored


def asked_sections(runs: dict, params_file=None, changes: dict[str, dict] | None = None) -> dict[str, Asked]:
    """{section: Asked} from the run folders of each section (as `make report` hands a notebook) and the params
    file's requests, with `changes` (registry.overrides) in place of the file's values."""
    params = _params_with(params_file, changes)
    return {section: asked(section, section_request(params, section), paths) for section, paths in runs.items()}


def _params_with(params_file, changes: dict[str, dict] | None) -> dict:
    """A params file (relative: to the project folder, wherever the kernel runs) with a notebook's changes."""
    path = Path(params_file or config.PARAMS_FILE)
    return with_overrides(load_params(path if path.is_absolute() else config.PROJECT_ROOT / path), changes)


def overrides(section: str, **values) -> dict[str, dict]:
    """A notebook's parameters as overrides of one params-file section: {section: {name: value}}, the empty ones
    (None, "", [], 0) left out, so they keep the file's. Text is read as YAML: papermill's -p hands a list over
    as the string '[1, 3]'."""
    given = {}
    for name, value in values.items():
        if isinstance(value, str):
            try:
                value = yaml.safe_load(value) if value.strip() else None
            except yaml.YAMLError as exc:
                raise UserError(f"{name}: {value!r} is not a value ({str(exc).splitlines()[0]})") from None
        if value is None or value == [] or value == "" or (value == 0 and not isinstance(value, bool)):
            continue
        given[name] = value
    return {section: given} if given else {}


def with_overrides(params: dict, changes: dict[str, dict], where: str = "notebook parameters") -> dict:
    """The params with each section's values replaced by the given ones, checked as the file's are."""
    merged = dict(params)
    for section, values in (changes or {}).items():
        if section not in SECTIONS:
            raise UserError(f"{where}: unknown section {section!r} (known: {', '.join(SECTIONS)})")
        merged[section] = {**params[section], **values}
        try:
            section_request(merged, section, where=f"{where} ({section})")
        except UserError as exc:
            raise UserError(f"{where} ({section}): {exc}") if section not in str(exc) else exc from None
    return merged


def ensure_sections(params_file: Path | str = config.PARAMS_FILE, data_dir: Path | str = config.DATA_DIR,
                    sections=None, db=None, progress: bool = True,
                    changes: dict[str, dict] | None = None) -> dict[str, list[str]]:
    """{section: [run folder, ...]} for the named sections of a params file (all by default), with `changes`
    (registry.overrides: a notebook's parameters) in place of the file's values.

    What `make report` passes each notebook, and what a notebook opened on its
    own finds (or makes) through this same function. A relative params_file is
    taken from the project folder, wherever the kernel runs.
    """
    params = _params_with(params_file, changes)
    return {section: [str(path) for path in ensure_section(params, section, Path(data_dir or config.DATA_DIR), db,
                                                           progress)[0]]
            for section in (sections or SECTIONS)}

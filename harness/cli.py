"""python -m harness: one subcommand per kind of experiment (from the registry), summary and reap.

Errors a user can cause print one line on stderr and exit 2; bugs keep their traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from harness import config
from harness.entry import OneLineParser, run_command
from harness.errors import UserError


def add_server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pg-version", type=int, default=config.DEFAULT_PG_VERSION,
                        choices=config.SUPPORTED_PG_VERSIONS, help="embedded/docker server major version (default 16)")
    parser.add_argument("--db", choices=("embedded", "docker", "url"), default=None,
                        help="where the server comes from (default: DATABASE_URL if set, else embedded)")
    parser.add_argument("--data-dir", type=Path, default=config.DATA_DIR, help="where results go (default data/)")


def _default_text(option, default) -> str:
    if option.default_text is not None:
        return option.default_text
    if isinstance(default, (tuple, list)):
        return ",".join(str(v) for v in default)
    return str(default)


def add_parameter_options(parser: argparse.ArgumentParser, asks: type) -> None:
    """A flag per field of a kind's dataclass that declares one; a flag not given leaves the field's default."""
    for spec in dataclasses.fields(asks):
        option = spec.metadata.get("option")
        if option is None:
            continue
        if option.takes_value:
            parser.add_argument(option.flag, dest=spec.name, type=option.parse, default=None, metavar=option.metavar,
                                help=f"{option.help} (default {_default_text(option, spec.default)})")
        else:
            parser.add_argument(option.flag, dest=spec.name, action="store_const", const=option.given,
                                default=None, help=option.help)


def _experiment_command(entry):
    def handler(args) -> int:
        from harness.experiments import registry

        given = {spec.name: getattr(args, spec.name) for spec in dataclasses.fields(entry.command_asks)
                 if spec.metadata.get("option") is not None and getattr(args, spec.name) is not None}
        paths = registry.measure(entry.name, entry.command_asks(**given), args.data_dir, args.db, args.pg_version,
                                 progress=not args.quiet)
        entry.show(paths, args.json)
        return 0

    return handler


def _summary(args) -> int:
    from harness.experiments.race.trials import print_summary
    from harness.stats import summarise_runs

    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        raise UserError(f"no data directory at {data_dir}")
    print_summary(summarise_runs(data_dir), as_json=args.json, per_run=args.runs)
    return 0


def _findings(args) -> int:
    # the article's side (altair, every section) takes seconds to import: only the command that reads it pays
    from harness.article.contents import findings_command

    return findings_command(args)


def _runners(args) -> int:
    from harness.service.runner import run_runners_command

    return run_runners_command(args)


def _reap(args) -> int:
    from harness.server.database import reap_stale_embedded_servers

    for path in reap_stale_embedded_servers():
        print(f"stopped and removed {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from harness.experiments.registry import KINDS

    parser = OneLineParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    for entry in KINDS.values():
        command = sub.add_parser(entry.name, help=entry.help, description=entry.help)
        add_parameter_options(command, entry.command_asks)
        command.add_argument("--json", action="store_true", help="print JSON objects, one per line")
        command.add_argument("--quiet", action="store_true", help="no progress bar")
        add_server_options(command)
        command.set_defaults(handler=_experiment_command(entry))

    summary = sub.add_parser("summary", help="one line per stored race, computed from its rows and audit")
    summary.add_argument("--data-dir", type=Path, default=config.DATA_DIR)
    summary.add_argument("--json", action="store_true", help="one JSON object per run")
    summary.add_argument("--runs", action="store_true",
                         help="one line per run (default: one per point, median and min-max over its repeats)")
    summary.set_defaults(handler=_summary)

    findings = sub.add_parser("findings", help="the original's findings beside ours, with a verdict each, "
                                               "from the runs stored for a params file")
    findings.add_argument("--json", action="store_true", help="a JSON array, one object per finding")
    findings.add_argument("--data-dir", type=Path, default=config.DATA_DIR,
                          help="where runs are stored (default data/)")
    findings.add_argument("--params", type=Path, default=config.PARAMS_FILE,
                          help="the sweeps whose runs are read (default notebooks/params/report.yml)")
    findings.set_defaults(handler=_findings)

    from harness.service.runner import add_runner_options

    runners = sub.add_parser("runners", help="start N runner processes that poll a claim service by its URL "
                                             "(they touch no database; run them on any machine that reaches it)")
    add_runner_options(runners)
    runners.set_defaults(handler=_runners)

    reap = sub.add_parser("reap", help="stop embedded servers left behind by a harness that was killed")
    reap.set_defaults(handler=_reap)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(lambda: _dispatch(build_parser().parse_args(argv)))


def _dispatch(args) -> int:
    return args.handler(args)



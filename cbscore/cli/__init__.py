"""The ``cbs`` command line.

Each subcommand group lives in its own module with ``register(subparsers)``; handlers import
their heavy dependencies lazily so that ``cbs --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from cbscore.errors import CbsError

# Modules that add subcommands. ``workers.cli`` and ``app.cli`` are listed by name and imported
# here (not by cbscore's library code) so that cbscore itself never imports celery or streamlit.
_COMMAND_MODULES = (
    "cbscore.cli.data",
    "cbscore.cli.train",
    "cbscore.cli.fit",
    "cbscore.cli.theory",
    "workers.cli",
    "app.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cbs",
        description="CBS Lab: measure and forecast the critical batch size of LM pre-training.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a group not built yet
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except CbsError as exc:
        print(f"cbs {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"cbs {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""``cbs study fields [FIELD]``: each study-spec field with its type, default, range and doc.

The ``study`` group is :mod:`workers.cli`'s; this command reads only the spec's classes, so it
lives in cbscore beside them.

The docs are the docstrings under the fields (:mod:`cbscore.study.spec_docs`), the same words the
Launch page shows as each field's help, so the terminal and the page cannot say different things;
a number's range is the one its field's metadata states, which the spec's check holds it to
(:mod:`cbscore.study.bounds`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import textwrap
from collections.abc import Sequence
from typing import Any

from cbscore.errors import ConfigError

#: Printed where a nested block's default would be (its fields are rows of their own).
BLOCK = "(block)"


def register_fields(sub: argparse._SubParsersAction) -> None:
    """``cbs study fields`` under ``cbs study``."""
    fields = sub.add_parser(
        "fields", help="every study-spec field with its type, default, range and doc (the Launch page's help)",
        description="Print each field of a study spec (YAML) with its type, default, range (a number's, as the "
                    "spec checks it) and doc: the docstring under the field, the words the Launch page shows "
                    "as its help.")
    fields.add_argument("name", nargs="?", default=None, metavar="FIELD",
                        help="one field or block, e.g. budget_margin, search or search.lrs (default: all)")
    fields.add_argument("--json", action="store_true", help="a list of {name, type, default, range, doc}")
    fields.set_defaults(handler=run_fields)


def run_fields(args: argparse.Namespace) -> int:
    from cbscore.field_docs import readable
    from cbscore.study.spec_docs import spec_fields

    rows = select(spec_fields(), args.name)
    if args.json:
        print(json.dumps([{"name": r.name, "type": r.type, "default": wire_default(r.default), "range": r.range,
                           "doc": readable(r.doc)} for r in rows], indent=1, default=str))
    else:
        print(format_fields(rows))
    return 0


def select(rows: Sequence, name: str | None) -> list:
    """The rows of field ``name`` and, for a block, of its fields; every row when ``name`` is None."""
    if name is None:
        return list(rows)
    out = [r for r in rows if r.name == name or r.name.startswith(name + ".")]
    if not out:
        blocks = sorted({r.name.split(".")[0] for r in rows if "." in r.name})
        raise ConfigError("FIELD", name, f"is not a study-spec field or block (blocks: {', '.join(blocks)}; "
                                         "`cbs study fields` lists every field)")
    return out


def wire_default(value: Any) -> Any:
    """A default as the spec's YAML/JSON writes it: tuples as lists, a nested block as ``(block)``."""
    if dataclasses.is_dataclass(value):
        return BLOCK
    if isinstance(value, tuple):
        return [wire_default(v) for v in value]
    if isinstance(value, dict):
        return {k: wire_default(v) for k, v in value.items()}
    return value


def format_fields(rows: Sequence, width: int = 100) -> str:
    """``name: type = default`` per field, its range (a number's) and its doc wrapped and indented under it."""
    from cbscore.field_docs import REQUIRED, readable

    blocks = []
    for r in rows:
        default = wire_default(r.default)
        shown = default if default in (REQUIRED, BLOCK) else f"= {json.dumps(default, default=str)}"
        lines = [f"{r.name}: {r.type} {shown}"]
        if r.range:  # (of a list's or a mapping's, each entry's)
            each = "each " if r.type.startswith(("tuple[", "Mapping[")) else ""
            lines += textwrap.wrap(f"range: {each}{r.range}", width, initial_indent="    ", subsequent_indent="      ")
        for paragraph in readable(r.doc).split("\n\n") if r.doc else ():
            lines += textwrap.wrap(paragraph, width, initial_indent="    ", subsequent_indent="    ",
                                   break_on_hyphens=False)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


__all__ = ["format_fields", "register_fields", "run_fields", "select", "wire_default"]

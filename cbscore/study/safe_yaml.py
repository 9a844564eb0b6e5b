"""YAML text from people (a pasted or uploaded spec), read with bounds a server can afford.

``yaml.safe_load`` refuses Python objects but expands aliases: a few hundred bytes of nested
``&a [*b, *b, ...]`` anchors (a "billion laughs") become 10⁹ objects and minutes of one core, and a
page that parses a paste takes the web app down for everyone. :func:`load_yaml` reads with
:class:`BoundedLoader`, a ``SafeLoader`` that refuses every anchor and alias (a spec never needs
one), nesting deeper than :data:`MAX_DEPTH`, and text longer than :data:`MAX_BYTES`, each with a
:class:`~cbscore.errors.ConfigError` that names the limit. Without aliases the object count is
bounded by the text's length, so a refused or accepted text costs milliseconds.
"""

from __future__ import annotations

from typing import Any

import yaml

from cbscore.errors import ConfigError

#: Longest YAML text read, in bytes (UTF-8). The paper presets are under 2 KiB.
MAX_BYTES = 64 * 1024
#: Deepest nesting of mappings and lists (a spec nests three deep: spec → search → lrs).
MAX_DEPTH = 12


class BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` without anchors, aliases (so no merge keys) or deep nesting."""

    field = "spec"

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            mark = event.start_mark
            raise ConfigError(self.field, f"line {mark.line + 1}, column {mark.column + 1}",
                              "must not use YAML anchors or aliases (&name, *name, <<: *name); "
                              "write each value out")
        depth = getattr(self, "_depth", 0)
        if depth >= MAX_DEPTH:
            mark = event.start_mark
            raise ConfigError(self.field, f"line {mark.line + 1}, column {mark.column + 1}",
                              f"must not nest mappings or lists more than {MAX_DEPTH} deep")
        self._depth = depth + 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth


def load_yaml(text: str | bytes, *, field: str = "spec", max_bytes: int = MAX_BYTES) -> Any:
    """The document in ``text``, read with :class:`BoundedLoader`.

    Raises:
        ConfigError: on ``field``: text over ``max_bytes``, an anchor or alias, nesting past
            :data:`MAX_DEPTH`, or text that is not YAML (the parser's first line, never the text).
    """
    size = len(text.encode("utf-8", errors="replace")) if isinstance(text, str) else len(text)
    if size > max_bytes:
        raise ConfigError(field, f"{size:,} bytes", f"must be at most {max_bytes:,} bytes of YAML")
    loader = BoundedLoader(text)
    loader.field = field
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ConfigError(field, f"{size:,} bytes", f"is not valid YAML ({type(exc).__name__}: {first})") from None
    except RecursionError:
        raise ConfigError(field, f"{size:,} bytes", f"must not nest more than {MAX_DEPTH} deep") from None
    finally:
        loader.dispose()

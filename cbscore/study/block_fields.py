"""The fields of a spec's sub-block (``local:``, ``decay:``) read from a mapping, checked alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from cbscore.errors import ConfigError


def block_fields(cls: type, data: Any, block: str) -> dict[str, Any]:
    """``data`` as the keyword arguments of dataclass ``cls``, the spec's ``block:`` mapping: a field
    ``cls`` does not have is refused naming ``block.field``, its value and the known fields."""
    if not isinstance(data, Mapping):
        raise ConfigError(block, data, "must be a mapping of fields")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{block}.{unknown[0]}", data[unknown[0]],
                          f"is not a {block} field (known: {', '.join(sorted(known))})")
    return dict(data)

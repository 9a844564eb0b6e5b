"""Each config field's documentation, read from the docstring written under it (as litgpt does).

Every config of the lab is a dataclass with a string literal right after each field::

    budget_margin: float = 0.25
    \"\"\"Slack of the budgets: ...\"\"\"

Python keeps no such string at run time, so it is read from the class's source with :mod:`ast`
(once per class, cached), walking the MRO so that a subclass's fields inherit their docs. The
Launch form's help and ``cbs study fields`` print these words and no copy of them: what a field
means is written once, beside the field. A number's range (:attr:`FieldDoc.range`) is read from the
field's metadata (``checked(..., range=...)``, :mod:`cbscore.config`), which the check of the
config's numbers reads too (the study spec's: :mod:`cbscore.study.bounds`).

A dotted name (``search.lrs``, ``decay.horizon_high``) follows the nested config a field holds (its
type, ``None`` aside), or, for a field typed as a plain mapping (the study spec's ``data``), the
class named for it in ``nested``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import sys
import textwrap
import types
import typing
from collections.abc import Mapping
from typing import Any

#: ``nested`` of the functions below: the config class that documents a field typed as a plain
#: mapping, by the field's dotted name (``{"data": DataConfig}``).
Nested = Mapping[str, type]


@dataclasses.dataclass(frozen=True)
class FieldDoc:
    """One field of a config, as ``cbs study fields`` prints it."""

    name: str
    """Dotted name (``search.lrs``)."""
    type: str
    """The annotation as written in the source (``tuple[float, ...]``, ``int | None``)."""
    default: Any
    """The default value (a nested config's fields are rows of their own); :data:`REQUIRED` when
    the field has none."""
    doc: str
    """The field's docstring (:func:`attribute_docs`); empty when it has none."""
    range: str = ""
    """The range its metadata states (``checked(..., range=...)``: ``a finite number in [0, 10]``;
    a list's, each entry's); empty when it states none."""


#: :attr:`FieldDoc.default` of a field without a default.
REQUIRED = "(required)"


@functools.cache
def _own_docs(cls: type) -> dict[str, str]:
    """The docstrings under the annotated attributes of ``cls``'s own body (not its bases')."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # a class built at run time has no source: no docs
        return {}
    tree = ast.parse(source)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    if node is None:
        return {}
    docs = {}
    for field, after in zip(node.body, node.body[1:]):
        if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[field.target.id] = _tidy(after.value.value)
    return docs


def _tidy(doc: str) -> str:
    """A docstring's paragraphs, each on one line (the source's line breaks are only its width)."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def attribute_docs(cls: type) -> dict[str, str]:
    """``{field name: docstring}`` of ``cls`` and its bases (a subclass's own doc wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is not object:
            docs.update(_own_docs(klass))
    return docs


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotation of each field of ``cls`` (once per class: a page asks for dozens)."""
    try:
        return typing.get_type_hints(cls)
    except NameError:  # a field's annotation names something absent at run time: resolve one by one
        scope = vars(sys.modules[cls.__module__])
        out = {}
        for f in dataclasses.fields(cls):
            try:
                out[f.name] = eval(f.type, scope) if isinstance(f.type, str) else f.type  # noqa: S307 (source text)
            except NameError:
                out[f.name] = Any
        return out


def _hint(cls: type, name: str) -> Any:
    """The resolved type of field ``name`` of ``cls``, ``None`` (and ``X | None``) stripped."""
    hint = _hints(cls)[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) == 1:
            hint = rest[0]
    return hint


def _field(cls: type, name: str) -> dataclasses.Field:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f
    known = ", ".join(f.name for f in dataclasses.fields(cls))
    raise KeyError(f"{name!r} is not a field of {cls.__name__} (known: {known})")


def owner(cls: type, dotted: str, nested: Nested | None = None) -> tuple[type, str]:
    """``(the class that declares the field, its own name)`` of a dotted field of ``cls``:
    ``owner(StudySpec, "search.lrs")`` is ``(SearchSpec, "lrs")``."""
    *path, name = dotted.split(".")
    for i, part in enumerate(path):
        _field(cls, part)
        prefix = ".".join(path[: i + 1])
        hint = (nested or {}).get(prefix) or _hint(cls, part)
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
            raise KeyError(f"{prefix!r} of {cls.__name__} holds no config class (its type is {hint!r}); "
                           f"name the class that documents it in nested")
        cls = hint
    _field(cls, name)
    return cls, name


def field_doc(cls: type, dotted: str, nested: Nested | None = None) -> str:
    """The docstring of a dotted field of ``cls`` (``"search.lrs"``); a :class:`KeyError` names
    a field that is not there or has no docstring."""
    klass, name = owner(cls, dotted, nested)
    doc = attribute_docs(klass).get(name)
    if not doc:
        raise KeyError(f"{klass.__name__}.{name} ({dotted}) has no docstring under it")
    return doc


#: An RST role (``:mod:`x```, ``:class:`~a.b.C```) or a literal (````x````), as the docstrings write them.
_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`|``([^`]+)``")


def readable(doc: str) -> str:
    """A docstring as a reader sees it on a page or a terminal: roles and literals as plain
    ```code``` (``:class:`~cbscore.study.spec_parts.SearchSpec``` → ```SearchSpec```)."""
    def one(m: re.Match) -> str:
        if m.group(3) is not None:
            return f"`{m.group(3)}`"
        target = m.group(2)
        return f"`{target.rsplit('.', 1)[-1] if m.group(1) else target}`"
    return _ROLE.sub(one, doc)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED


def field_rows(cls: type, nested: Nested | None = None, prefix: str = "") -> list[FieldDoc]:
    """Every field of ``cls`` in declaration order, each nested config's fields after its own row
    (``search``, then ``search.kind``, ...); a field named in ``nested`` opens that class."""
    docs = attribute_docs(cls)
    rows = []
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        written = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        stated = f.metadata.get("range")
        rows.append(FieldDoc(name=name, type=written, default=_default(f), doc=docs.get(f.name, ""),
                             range=stated.describe() if stated is not None else ""))
        inner = (nested or {}).get(name) or _hint(cls, f.name)
        if isinstance(inner, type) and dataclasses.is_dataclass(inner):
            rows.extend(field_rows(inner, nested, prefix=name + "."))
    return rows


__all__ = ["REQUIRED", "FieldDoc", "Nested", "attribute_docs", "field_doc", "field_rows", "owner", "readable"]

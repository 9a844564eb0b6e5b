"""The README and the manual in docs/: every relative link and image points at a file that exists
(and at a heading that exists, for ``#anchor``s, by GitHub's slug rule), and every ``cbs ...``
command they show names a real subcommand and real options."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from cbs import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "results").rglob("*.md")])

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def _prose(text: str) -> str:
    """The text outside fenced blocks and code spans (a link inside code is not a link)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower-cased, punctuation but ``-`` and
    ``_`` dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"\\(.)", r"\1", text).replace("`", "")
    text = re.sub(r"(\*\*|__|\*)", "", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text())):
        slug = github_slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """Every relative link or image of ``page`` whose file, or whose heading, does not exist."""
    broken = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no file {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved.name})")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_the_docs_resolves(page):
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Data: `cbs data`\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/a.md#data-cbs-data) [here](#top) `[code](nowhere.md)`\n"
                    "[gone](docs/b.md) ![img](docs/pic.png) [bad anchor](docs/a.md#data)\n\n# Top\n"
                    "```\n[in a block](nowhere.md)\n```\n")
    assert broken_links(page) == ["docs/b.md (no file docs/b.md)", "docs/pic.png (no file docs/pic.png)",
                                  "docs/a.md#data (no heading #data in a.md)"]


def test_github_slugs_of_the_manuals_headings():
    assert github_slug("GPU check: `benchmarks/gpu_check.sh`") == "gpu-check-benchmarksgpu_checksh"
    assert github_slug("Studies on workers: `cbs study`, `cbs worker`, `cbs tracking`") == \
        "studies-on-workers-cbs-study-cbs-worker-cbs-tracking"
    assert github_slug("The lab (web app)") == "the-lab-web-app"


# --- commands -------------------------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def command_errors(command: str, parser: argparse.ArgumentParser) -> list[str]:
    """What is wrong with one documented ``cbs ...`` line: a subcommand or an option the parser
    does not have. Placeholders (``NAME``, ``SPEC.yaml``, ``…``) and ``# comments`` are skipped."""
    words = command.split("#", 1)[0].split()[1:]
    node, path = parser, ["cbs"]
    while words and (subs := _subcommands(node)) and re.fullmatch(r"[a-z][a-z-]*", words[0]):
        if words[0] not in subs:
            return [f"{' '.join(path)} has no subcommand {words[0]!r} (in {command!r})"]
        node = subs[words[0]]
        path.append(words.pop(0))
    errors = []
    for word in words:
        for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", word):
            if flag not in _options(node):
                errors.append(f"{' '.join(path)} has no option {flag} (in {command!r})")
    return errors


def documented_commands(page: Path) -> list[str]:
    """Every ``cbs ...`` line of a code block, and every inline code span that starts with ``cbs ``."""
    text = page.read_text()
    commands = []
    for block in (m.group(0) for m in _FENCE.finditer(text)):
        commands += [line.strip() for line in block.splitlines() if line.strip().startswith("cbs ")]
    for span in _CODE_SPAN.findall(_FENCE.sub("", text)):
        span = " ".join(span.strip("`").split())
        if span.startswith("cbs "):
            commands.append(span)
    return commands


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_cbs_command_names_real_subcommands_and_options(page):
    parser = build_parser()
    errors = [e for command in documented_commands(page) for e in command_errors(command, parser)]
    assert errors == []


def test_a_command_with_a_wrong_subcommand_or_option_is_caught():
    parser = build_parser()
    assert command_errors("cbs study launch demo --dry-run  # plan only", parser) == []
    assert command_errors("cbs data prepare [--source builtin|PATH] [--vocab-size 8192]", parser) == []
    assert command_errors("cbs study relaunch demo", parser) == ["cbs study has no subcommand 'relaunch' (in 'cbs study relaunch demo')"]
    assert command_errors("cbs fit TABLE.csv --b-reff 2", parser) == ["cbs fit has no option --b-reff (in 'cbs fit TABLE.csv --b-reff 2')"]

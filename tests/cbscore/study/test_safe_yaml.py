"""Pasted YAML is read with bounds: no anchors or aliases, at most 64 KiB, at most 12 deep (issue 21,
finding 3: a 600-byte alias bomb took the web app down for minutes)."""

from __future__ import annotations

import time

import pytest

from cbscore.errors import ConfigError
from cbscore.study import StudySpec
from cbscore.study.safe_yaml import MAX_BYTES, load_yaml


def billion_laughs(levels: int = 9) -> str:
    """~450 bytes that ``yaml.safe_load`` expands into 9**levels strings."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\nname: bomb\n"


def refused_within_a_second(text: str) -> ConfigError:
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        StudySpec.from_yaml(text)
    assert time.perf_counter() - start < 1.0
    return err.value


def test_an_alias_bomb_is_refused_in_milliseconds_naming_the_rule():
    err = refused_within_a_second(billion_laughs())
    assert err.field == "spec" and "anchors or aliases" in err.reason
    assert len(billion_laughs()) < 600


@pytest.mark.parametrize("text", [
    "name: x\nsearch: &s {kind: grid}\n",  # an anchor alone
    "base: &b {kind: grid}\nname: x\nsearch: {<<: *b}\n",  # a merge key needs an alias
])
def test_anchors_and_merge_keys_are_refused(text):
    assert "anchors or aliases" in refused_within_a_second(text).reason


def test_text_over_the_size_limit_is_refused_before_parsing():
    err = refused_within_a_second("name: x\n" + "# padding\n" * (MAX_BYTES // 10 + 1))
    assert err.reason == f"must be at most {MAX_BYTES:,} bytes of YAML"


def test_deep_nesting_is_refused_within_the_size_limit():
    err = refused_within_a_second("[" * 30_000 + "]" * 30_000)
    assert "more than 12 deep" in err.reason


def test_invalid_yaml_names_the_parser_error_never_the_text():
    err = refused_within_a_second("name: [hunter2-secret\n")
    assert "not valid YAML" in err.reason and "hunter2" not in str(err)


def test_a_plain_document_still_reads():
    assert load_yaml("a: [1, 2, {b: c}]\n") == {"a": [1, 2, {"b": "c"}]}

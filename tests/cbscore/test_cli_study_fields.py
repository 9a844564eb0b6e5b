"""``cbs study fields``: each study-spec field with its type, default and doc, the doc being the
docstring under the field (the words the Launch page's help shows)."""

from __future__ import annotations

import json

from cbs import main as cbs_main
from cbscore.study.spec_docs import spec_field_doc


def test_one_field_prints_its_type_default_and_doc(capsys):
    assert cbs_main(["study", "fields", "budget_margin"]) == 0
    out = capsys.readouterr().out
    head, stated, *doc = out.splitlines()
    assert head == "budget_margin: float = 0.25"
    assert stated == "    range: a finite number in [0, 10]"  # the field's metadata, as the spec checks it
    text = " ".join(line.strip() for line in doc)
    assert all(line.startswith("    ") and len(line) <= 100 for line in doc)  # wrapped under the name
    assert text.startswith("Slack of each trial's budget: below B_ref a trial gets")
    assert "The paper presets set 0.5" in text


def test_a_block_lists_its_fields_and_json_gives_the_same_words_as_the_page(capsys):
    assert cbs_main(["study", "fields", "search", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["search"]["default"] == "(block)"
    assert rows["search.lrs"]["default"] == [0.001, 0.00316, 0.00632, 0.01, 0.0316]
    narrow = rows["search.bracket_min_batch_size"]
    assert (narrow["type"], narrow["default"]) == ("int | None", None)
    assert narrow["doc"] == spec_field_doc("search.bracket_min_batch_size")
    assert narrow["range"] == "a finite number within ±1e+18"  # a field that states none: only finite
    assert rows["search.lrs"]["range"] == "a finite number in (0, 10]"
    assert rows["search.kind"]["range"] == ""
    assert "`narrow_rates`" in narrow["doc"]  # ``literals`` read as `code`, as on the page
    assert not [name for name in rows if not name.startswith("search")]


def test_the_data_block_is_documented_by_the_data_config(capsys):
    assert cbs_main(["study", "fields", "data.source"]) == 0
    assert capsys.readouterr().out.startswith('data.source: str = "builtin"\n    `builtin` (public-domain English')


def test_an_unknown_field_is_named_with_the_blocks(capsys):
    assert cbs_main(["study", "fields", "serch"]) == 2
    err = capsys.readouterr().err
    assert "FIELD: is not a study-spec field or block (blocks: data, decay, experimental, local, search;" in err
    assert "'serch'" in err


def test_a_list_fields_range_is_each_entrys(capsys):
    assert cbs_main(["study", "fields", "local.multipliers"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "    range: each a finite number in (0, 1024]"

"""A scalar where a spec list belongs (``lrs: 0.001``, ``settings: 4``) is refused by a
:class:`ConfigError` that names the field, never a raw ``TypeError`` from iterating it."""

import pytest

from cbscore.errors import ConfigError
from cbscore.study import StudySpec
from cbscore.study.presets import load_preset
from cbscore.study.spec_docs import spec_fields

#: a preset whose spec has each block (a field of a block the preset lacks is set on it)
BASES = {"": "demo", "search": "demo", "local": "local-demo", "decay": "ablation-schedule"}
LIST_FIELDS = [row.name for row in spec_fields()
               if row.type.startswith("tuple") and row.name.rpartition(".")[0] in BASES]


def test_the_list_fields_are_found():
    assert {"batch_sizes", "settings", "ewa_taus", "search.lrs", "search.replicate_batch_sizes",
            "local.multipliers"} <= set(LIST_FIELDS)


@pytest.mark.parametrize("value", [4, 0.5, True])
@pytest.mark.parametrize("name", LIST_FIELDS)
def test_a_scalar_in_a_list_field_is_refused_naming_the_field(name, value):
    block, _, leaf = name.rpartition(".")
    spec = load_preset(BASES[block]).to_dict()
    if block:
        spec[block] = {**(spec.get(block) or {}), leaf: value}
    else:
        spec[leaf] = value
    with pytest.raises(ConfigError) as err:
        StudySpec.from_dict(spec)
    assert err.value.field.startswith(name) and err.value.value == value

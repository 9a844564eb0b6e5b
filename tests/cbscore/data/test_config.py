"""DataConfig: validation with clear messages, the wire format, the store key."""

from __future__ import annotations

import pytest

from cbscore.data import DataConfig
from cbscore.errors import ConfigError


def test_to_dict_from_dict_round_trip():
    config = DataConfig(source="corpus.jsonl", vocab_size=4096, val_fraction=0.05, seed=3, max_documents=10)
    assert DataConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["vocab_size"] == 4096


def test_defaults_are_the_builtin_corpus_and_an_8192_bpe():
    config = DataConfig()
    assert (config.source, config.tokenizer, config.vocab_size) == ("builtin", "bpe", 8192)


@pytest.mark.parametrize(
    ("fields", "field", "value"),
    [
        ({"vocab_size": 256}, "vocab_size", 256),
        ({"vocab_size": 8192.0}, "vocab_size", 8192.0),
        ({"vocab_size": 2**20 + 1}, "vocab_size", 2**20 + 1),
        ({"vocab_size": 2**32 - 1}, "vocab_size", 2**32 - 1),
        ({"val_fraction": 0.0}, "val_fraction", 0.0),
        ({"val_fraction": 0.9}, "val_fraction", 0.9),
        ({"seed": -1}, "seed", -1),
        ({"max_documents": 1}, "max_documents", 1),
        ({"source": ""}, "source", ""),
        ({"source": "hub:"}, "source", "hub:"),
        ({"source": "hub:allenai/c4:en"}, "max_documents", None),
    ],
)
def test_bad_values_raise_config_error_naming_field_and_value(fields, field, value):
    with pytest.raises(ConfigError) as info:
        DataConfig(**fields)
    assert info.value.field == field and info.value.value == value
    assert str(info.value).startswith(f"{field}: ")
    assert str(info.value).endswith(f"but got {value!r}.")


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ConfigError, match=r"^vocab: is not a DataConfig field, but got 10\.$"):
        DataConfig.from_dict({"vocab": 10})


def test_config_is_frozen_and_keyword_only():
    with pytest.raises(TypeError):
        DataConfig("builtin")  # noqa: the config is kw_only
    with pytest.raises(AttributeError):
        DataConfig().seed = 1  # type: ignore[misc]


def test_store_key_depends_on_content_settings_only(tmp_path, monkeypatch):
    base = DataConfig()
    assert base.key() == DataConfig().key()
    assert base.key() != DataConfig(vocab_size=4096).key()
    assert base.key() != DataConfig(seed=1).key()
    assert base.key() != DataConfig(max_documents=100).key()
    assert base.key() == DataConfig(store_dir=str(tmp_path)).key()
    monkeypatch.chdir(tmp_path)
    assert DataConfig(source="a.txt").key() == DataConfig(source=str(tmp_path / "a.txt")).key()


def test_default_store_path_is_under_cbs_home_data(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    config = DataConfig()
    assert config.store_path() == tmp_path / "data" / config.key()
    assert DataConfig(store_dir=str(tmp_path / "x")).store_path() == tmp_path / "x"


@pytest.mark.parametrize(
    "spelling", ["gpt-neox-20b", "EleutherAI/gpt-neox-20b", "hub:EleutherAI/gpt-neox-20b", "hf:EleutherAI/gpt-neox-20b",
                 " hf:gpt-neox-20b "])
def test_hub_tokenizer_spellings_resolve_to_one_name_and_one_store(spelling):
    config = DataConfig(tokenizer=spelling)
    assert config.tokenizer == config.hub_tokenizer == "EleutherAI/gpt-neox-20b"
    assert not config.uses_bpe
    assert config.key() == DataConfig(tokenizer="EleutherAI/gpt-neox-20b").key()
    assert DataConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("value", ["hf:", "hub:  ", "hf:bpe", "my tokenizer", ""])
def test_bad_tokenizer_names_raise_config_error_naming_the_field_and_value(value):
    with pytest.raises(ConfigError) as info:
        DataConfig(tokenizer=value)
    assert info.value.field == "tokenizer"
    assert str(info.value).endswith(f"but got {value!r}.")


def test_a_vocabulary_above_2_to_the_20_is_refused_naming_the_field():
    """Issue 41, finding 9: vocab_size up to 2**32 - 1 was accepted and the trial process aborted."""
    assert DataConfig(vocab_size=2**20).vocab_size == 2**20
    with pytest.raises(ConfigError) as info:
        DataConfig(vocab_size=4_294_967_295)
    assert str(info.value) == ("vocab_size: a byte-level BPE needs at least 257 tokens (256 bytes + end-of-text) "
                               "and at most 1,048,576 (2**20), but got 4294967295.")


def test_expected_vocab_size_is_known_without_the_network():
    assert DataConfig().expected_vocab_size == 8192
    assert DataConfig(vocab_size=1024).expected_vocab_size == 1024
    assert DataConfig(tokenizer="gpt-neox-20b").expected_vocab_size == 50_277
    assert DataConfig(tokenizer="acme/unknown-tokenizer").expected_vocab_size is None

"""`cbs data prepare` and `cbs data info` through ``cbs.main``."""

from __future__ import annotations

import json

from cbs import main


def _slice_args(tmp_path) -> list[str]:
    return ["--max-documents", "30", "--vocab-size", "400", "--store-dir", str(tmp_path / "store")]


def test_prepare_prints_corpus_size_and_time_as_json(tmp_path, capsys):
    assert main(["data", "prepare", *_slice_args(tmp_path), "--context", "128", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    train, val = summary["splits"]["train"], summary["splits"]["val"]
    assert train["documents"] + val["documents"] == 30
    assert val["documents"] == 1  # round(0.02 * 30) -> at least one held-out document
    assert train["windows"] == train["tokens"] // 129
    assert train["characters"] > 0 and summary["seconds"] >= 0
    assert summary["reused"] is False and summary["vocab_size"] == 400
    assert main(["data", "prepare", *_slice_args(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reused"] is True


def test_prepare_table_and_info(tmp_path, capsys):
    assert main(["data", "prepare", *_slice_args(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "token store built" in out and "train" in out and "windows of 513" in out and "time:" in out
    assert main(["data", "info", *_slice_args(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tokenizer_sha256" in out and "train.bin" in out
    assert main(["data", "info", *_slice_args(tmp_path), "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["vocab_size"] == 400 and manifest["config"]["max_documents"] == 30


def test_info_before_prepare_exits_2_with_message(tmp_path, capsys):
    assert main(["data", "info", "--store-dir", str(tmp_path / "none")]) == 2
    assert "cbs data: error:" in capsys.readouterr().err


def test_unknown_source_exits_2_naming_it(tmp_path, capsys, monkeypatch):
    # From a folder outside every data root (the tests' roots include the temporary folder, where a
    # clean clone may live).
    monkeypatch.chdir("/")
    assert main(["data", "prepare", "--source", "c5-corpus", "--store-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    # Outside the data roots (a relative name resolves against the working folder): refused by name.
    assert "cbs data: error: data.source: must be 'builtin'" in err and "'c5-corpus'" in err
    assert "Traceback" not in err
    assert not (tmp_path / "s").exists()


def test_bad_vocab_size_exits_2_naming_the_field(capsys):
    assert main(["data", "prepare", "--vocab-size", "12"]) == 2
    assert "vocab_size:" in capsys.readouterr().err


def test_offline_hub_source_exits_2_quickly(tmp_path, capsys):
    code = main(["data", "prepare", "--source", "hub:allenai/c4:en", "--max-documents", "100",
                 "--store-dir", str(tmp_path / "s")])
    assert code == 2
    err = capsys.readouterr().err
    assert "allenai/c4" in err and "builtin" in err

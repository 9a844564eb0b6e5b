"""The schedule readout's JSON (``cbs study fit NAME --json``, the report's ``schedules.json``) and
text, byte for byte as the readout wrote them when it was a plain dict: the fixtures in ``data/``
were written by that code on the synthetic runs of ``test_decay_readout``; since then they gained the
E(S) fit's note where B_opt sits at the grid's end (``cbscore.analysis._wsd_fit``), and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cbscore.study.decay_readout import ScheduleReadout, format_schedule, schedule_readout
from tests.cbscore.study.test_decay_readout import SPEC, records

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parents[3]


def _cases() -> dict:
    every = records(SPEC)
    return {
        "full": lambda: schedule_readout(SPEC, every, bootstrap=200, seed=3),
        "no_cosine_target": lambda: schedule_readout(
            SPEC, [r for r in every if not (r.batch_size == 1 and r.role == "cosine")], bootstrap=0),
        "few": lambda: schedule_readout(SPEC, [r for r in every if r.role == "stable" or r.batch_size == 1],
                                        bootstrap=0),
    }


@pytest.mark.parametrize("case", ["full", "no_cosine_target", "few"])
def test_the_typed_readout_writes_the_json_and_text_the_dict_readout_wrote(case):
    readout = _cases()[case]()
    want = json.loads((DATA / "schedule_readouts.json").read_text())[case]
    assert json.dumps(readout.to_json_dict(), indent=2, allow_nan=False) == json.dumps(want, indent=2)
    assert format_schedule(readout) == json.loads((DATA / "schedule_readout_texts.json").read_text())[case]


@pytest.mark.parametrize("path", ["docs/results/ablation-schedule/schedules.json",
                                  "docs/results/ablation-schedule/one-grid/schedules.json"])
def test_a_committed_report_readout_reads_back_and_writes_itself_byte_for_byte(path):
    text = (ROOT / path).read_text()
    committed = json.loads(text)
    readout = ScheduleReadout.from_json_dict(committed)
    out = readout.to_json_dict()
    # `decay` is the spec's block as today's DecaySpec writes it: a file written before a field was
    # added (one-grid/) gains it at its default; everything else is byte for byte
    assert {k: out["decay"][k] for k in committed["decay"]} == committed["decay"]
    out["decay"] = committed["decay"]
    assert json.dumps(out, indent=2, allow_nan=False) + "\n" == text
    assert format_schedule(readout) + "\n" == (ROOT / path).with_suffix(".txt").read_text()

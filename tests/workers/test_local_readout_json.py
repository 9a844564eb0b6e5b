"""The local readout's JSON (``cbs study fit NAME --json`` for ``kind: local``) and text, byte for byte
as the readout wrote them when it was a plain dict: the fixtures in ``data/`` were written by that
code on the synthetic branches and arms of ``test_local_charts``, ``test_local_warmup`` and
``test_local_readout_averaging``; the committed ``docs/results/local-cbs`` fits read back and
write themselves again."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cbscore.local import LocalStudyReadout
from cbscore.study import StudySpec, TrialRecord
from tests.app import test_local_charts as charts
from tests.workers import test_local_readout_averaging as averaging
from workers.studies.kinds import worker_kind
from workers.studies.local_fit import format_local, local_readout

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parents[2]
SQRT2 = math.sqrt(2)


def _arm(role, seed, loss, steps, batch, status="finished", raw=None) -> TrialRecord:
    return TrialRecord(trial_id=f"loc.{role}.s{seed}", cell_id=role, setting_id="s", role=role, batch_size=batch,
                       lr=0.01, status=status, final_eval_loss=loss, final_raw_loss=raw, last_step=steps,
                       tokens=4096, seed=seed)


def _arms_spec() -> StudySpec:
    return StudySpec.from_dict({**charts.spec().to_dict(), "seeds": [0, 1, 2], "local": {
        **charts.spec().local.to_dict(), "warmup_run": True, "warmup_schedule": [[1024, 8, SQRT2], [2048, 16, 2.0]]}})


def _cases() -> dict:
    recs, curves = charts.records()
    diverged = [r if r.trial_id != "loc.t1024.k2.s0" else TrialRecord(**{**r.to_dict(), "status": "diverged"})
                for r in recs]
    losses = {"warmup": (5.00, 5.02, 4.99), "control-small": (5.01, 5.00, 5.00), "control-large": (5.20, 5.25, 5.22)}
    steps = {"warmup": 32, "control-small": 64, "control-large": 16}
    arms = [_arm(role, s, losses[role][s], steps[role], 16 if role == "control-large" else 4)
            for role in losses for s in range(3)]
    partial = [_arm("warmup", 0, 5.3, 40, 4), _arm("control-small", 0, 5.0, 64, 4),
               _arm("control-small", 1, float("nan"), 10, 4, status="diverged"),
               _arm("control-large", 0, None, 3, 16, status="running")]
    raw_spec = averaging.spec(warmup_run=True, warmup_schedule=[[1024, 8, 2 ** 0.5], [2048, 16, 2.0]])
    raw_losses = {"warmup": ((5.00, 5.10), (5.02, 5.12)), "control-small": ((5.00, 5.00), (5.02, 5.02)),
                  "control-large": ((5.20, 5.30), (5.22, 5.32))}
    raw_steps = {"warmup": 30, "control-small": 64, "control-large": 16}
    raw_arms = [_arm(role, seed, a, raw_steps[role], 4, raw=r)
                for role, seeds in raw_losses.items() for seed, (a, r) in enumerate(seeds)]
    return {
        "charts": lambda: local_readout(charts.spec(), recs, lambda r: curves[r.trial_id],
                                        {0: ([64.0, 128.0], [3.0, 5.0]), 1: ([], [])}),
        "diverged": lambda: local_readout(charts.spec(), diverged, lambda r: curves[r.trial_id]),
        "pending": lambda: local_readout(charts.spec(), [r for r in recs if r.trial_id != "loc.t2048.k4.s0"],
                                         lambda r: curves[r.trial_id]),
        "empty": lambda: local_readout(charts.spec(), [], lambda r: []),
        "arms3": lambda: local_readout(_arms_spec(), recs + arms, lambda r: curves.get(r.trial_id, [])),
        "arms_partial": lambda: local_readout(_arms_spec(), partial, lambda r: []),
        "averaging": lambda: averaging.read(averaging.spec()),
        "averaging_noraw": lambda: averaging.read(averaging.spec(), raw=False),
        "growing": lambda: averaging.read(averaging.spec(window_rule="growing", averaging="tokens")),
        "carry": lambda: averaging.read(averaging.spec(averaging="carry")),
        "arms_raw": lambda: local_readout(raw_spec, averaging.records() + raw_arms, lambda r: [5.0] * 10),
    }


@pytest.mark.parametrize("case", ["charts", "diverged", "pending", "empty", "arms3", "arms_partial", "averaging",
                                  "averaging_noraw", "growing", "carry", "arms_raw"])
def test_the_typed_readout_writes_the_json_and_text_the_dict_readout_wrote(case):
    readout = _cases()[case]()
    want = json.loads((DATA / "local_readouts.json").read_text())[case]
    text = json.dumps(readout.to_json_dict(), indent=2, allow_nan=False)
    assert text == json.dumps(want, indent=2)
    assert json.dumps(worker_kind(charts.spec()).json_of_readout(readout), indent=2) == text  # `cbs study fit --json`
    assert format_local(readout) == json.loads((DATA / "local_readout_texts.json").read_text())[case]
    back = LocalStudyReadout.from_json_dict(json.loads(text))
    assert back.to_json_dict() == readout.to_json_dict() and format_local(back) == format_local(readout)


@pytest.mark.parametrize("name", ["fit.json", "fit-before-arms.json"])
def test_a_committed_fit_reads_back_and_writes_itself_byte_for_byte(name):
    text = (ROOT / "docs/results/local-cbs" / name).read_text()
    readout = LocalStudyReadout.from_json_dict(json.loads(text))
    assert json.dumps(readout.to_json_dict(), indent=2, allow_nan=False) + "\n" == text

"""Issue 45: the three ablation presets and their GPU variants launch on the corpus they name.

Each passes the launch checks (``cbs study launch``'s :func:`check_spec`: the lab's ceilings, the data
location, every trial's ``TrainConfig`` built), every trial the planner starts first trains on the
preset's ``data.source`` (``builtin-large``, not the default ``builtin``), and the longest trial of a
schedule study reads no more than that corpus holds in one pass (docs/schedules.md: 15.6M training
tokens, what ``cbs data`` reported when it was prepared)."""

from __future__ import annotations

import pytest

from cbscore.study import load_preset, plan
from workers.studies.launch_checks import check_spec

PRESETS = ("ablation-schedule", "ablation-schedule-gpu", "ablation-context", "ablation-context-gpu",
           "ablation-width-depth", "ablation-width-depth-gpu")
#: builtin-large's training tokens in one pass (docs/schedules.md, "Every preset reads builtin-large").
BUILTIN_LARGE_TOKENS = 15.6e6


@pytest.mark.parametrize("name", PRESETS)
def test_an_ablation_preset_launches_on_the_corpus_it_names(name):
    spec = load_preset(name)
    assert spec.data["source"] == "builtin-large"
    check_spec(spec)  # refuses nothing
    first = plan(spec, [], 0.0).start
    assert first and {t.train_config["data"]["source"] for t in first} == {"builtin-large"}
    if spec.kind == "schedule":
        from workers.studies.decay_study import largest_trial

        tokens, _, _ = largest_trial(spec)
        assert 0 < tokens <= BUILTIN_LARGE_TOKENS

import math

import pytest

from cbscore.analysis import MeasuredPoint, TrialSteps, measure_points, trial_steps
from cbscore.errors import ConfigError


def test_trial_steps_reached_interpolates_the_crossing():
    # on a power law (loss 10·step^-0.2) the crossing rule is exact
    t = trial_steps(256, [0, 100, 200], [12.0, 10 * 100 ** -0.2, 10 * 200 ** -0.2], 10 * 150 ** -0.2)
    assert t.outcome == "reached" and t.steps == pytest.approx(150.0)


def test_trial_steps_non_finite_history_is_diverged_and_flat_one_censored():
    assert trial_steps(256, [0, 100], [5.0, math.nan], 2.5).outcome == "diverged"
    assert trial_steps(256, [0, 100], [5.0, math.inf], 2.5).outcome == "diverged"
    censored = trial_steps(256, [0, 100], [5.0, 4.0], 2.5)
    assert censored.outcome == "censored" and censored.steps is None


def test_min_over_reached_trials_and_outcomes_are_counted_not_entered():
    trials = [
        TrialSteps(batch_size=128, steps=900.0),
        TrialSteps(batch_size=128, steps=700.0),
        TrialSteps(batch_size=128, outcome="diverged"),
        TrialSteps(batch_size=64, steps=1500.0),
        TrialSteps(batch_size=64, outcome="censored"),
        TrialSteps(batch_size=64, outcome="pruned"),
        TrialSteps(batch_size=512, outcome="censored"),
    ]
    p64, p128, p512 = measure_points(trials)
    assert p64 == MeasuredPoint(
        batch_size=64, steps=1500.0, trial_steps=(1500.0,), n_trials=3, n_censored=1,
        n_diverged=0, n_other=1,
    )
    assert (p128.steps, p128.trial_steps, p128.n_diverged, p128.n_reached) == (700.0, (700.0, 900.0), 1, 2)
    assert p512.steps is None and p512.n_censored == 1 and p512.n_reached == 0


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"batch_size": 0, "steps": 1.0}, "batch_size"),
        ({"batch_size": 64.0, "steps": 1.0}, "batch_size"),
        ({"batch_size": 64, "steps": -1.0}, "steps"),
        ({"batch_size": 64, "steps": math.nan}, "steps"),
        ({"batch_size": 64}, "steps"),
        ({"batch_size": 64, "outcome": "censored", "steps": 10.0}, "steps"),
        ({"batch_size": 64, "outcome": "exploded"}, "outcome"),
    ],
)
def test_trial_steps_rejects_bad_fields_naming_them(kwargs, field):
    with pytest.raises(ConfigError) as info:
        TrialSteps(**kwargs)
    assert info.value.field == field

"""The pure pieces behind the pages: form text ↔ spec, fit results → chart inputs, cell states."""

from __future__ import annotations

import pytest

from app import fit_view, spec_form, study_view, units
from cbscore.errors import ConfigError
from cbscore.study import PRESET_NAMES, estimate, load_preset


@pytest.mark.parametrize("text, count", [
    ("1.741B", 1_741_000_000), ("2e6", 2_000_000), ("500k", 500_000), ("2_000_000", 2_000_000), ("3M", 3_000_000),
])
def test_token_counts_read_as_written(text, count):
    assert spec_form.parse_count("tokens", text) == count
    assert spec_form.parse_count("tokens", spec_form.format_count(count)) == count


def test_bad_counts_name_the_field_and_value():
    with pytest.raises(ConfigError) as err:
        spec_form.parse_count("tokens", "2.5")
    assert str(err.value) == "tokens: must be a whole number of tokens, but got '2.5'."
    with pytest.raises(ConfigError) as err:
        spec_form.parse_ints("batch_sizes", "8, sixteen")
    assert str(err.value) == "batch_sizes: must be a whole number, but got 'sixteen'."


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_form_round_trip_gives_back_every_preset(preset):
    spec = load_preset(preset)
    base = spec.to_dict()
    assert spec_form.build_spec(base, spec_form.form_values(base)) == spec


def test_planned_cells_add_up_to_the_estimate():
    spec = load_preset("demo")
    cells = spec_form.planned_cells(spec)
    assert len(cells) == estimate(spec).cells == 18
    assert sum(c["trials"] for c in cells) == estimate(spec).trials == 36
    # Reference trials spend D, the others budget_multiple·D, capped in steps at B·T tokens each.
    ref = next(c for c in cells if c["role"].startswith("reference") and c["setting"] == "tiny-0.1M_D160K")
    assert ref["budget per trial (tokens)"] == 160_000 and ref["budget per trial (steps)"] == 160_000 // (16 * 128)


def test_best_trial_of_a_cell_is_the_fewest_steps_and_censored_gives_a_floor():
    rows = [
        {"setting": "s", "batch_size": 64, "steps": 900.0, "outcome": "reached", "lr": 0.01},
        {"setting": "s", "batch_size": 64, "steps": 700.0, "outcome": "reached", "lr": 0.003},
        {"setting": "s", "batch_size": 64, "steps": "", "outcome": "diverged", "lr": 0.03},
        {"setting": "s", "batch_size": 128, "steps": 300.0, "outcome": "censored"},
    ]
    best = fit_view.best_trials(rows)
    assert list(best) == [("s", 64)] and best[("s", 64)]["lr"] == 0.003
    assert fit_view.censored_floors(rows) == {("s", 128): 300.0}


def test_fitted_law_is_drawn_with_n_in_millions():
    class Law:
        coef, exponent, exponent_ci = 2.0, 0.5, (0.4, 0.6)

    line = fit_view.fitted_law(Law, "n")
    # B* = 2·N^0.5 with N in parameters is 2·(10⁶·m)^0.5 = 2000·m^0.5 with m in millions.
    assert line.coef == pytest.approx(2000.0) and line(4.0) == pytest.approx(2.0 * 4e6**0.5)
    assert "α ∈ [0.400, 0.600]" in line.label
    assert fit_view.fitted_law(Law, "d").coef == 2.0


def test_default_b_ref_prefers_the_study_then_the_paper():
    assert fit_view.default_b_ref([64, 128, 256, 512], 128) == 128
    assert fit_view.default_b_ref([64, 128, 256, 512], 100) == 256
    assert fit_view.default_b_ref([8, 16, 32], None) == 16


@pytest.mark.parametrize("state, counts, colour", [
    ("waiting", {}, "planned"),
    ("running", {"queued": 2}, "queued"),
    ("running", {"running": 1, "reached": 2}, "running"),
    ("done", {"reached": 1, "censored": 2}, "reached"),
    ("done", {"censored": 2, "diverged": 1}, "censored"),
    ("done", {"diverged": 3}, "diverged"),
    ("running", {"lost": 1}, "lost"),
    ("skipped", {}, "skipped"),
])
def test_cell_colour_follows_its_trials(state, counts, colour):
    assert study_view.cell_state(state, counts) == colour


def test_eta_is_the_budget_left_at_the_current_rate():
    assert study_view.eta_s(1_000_000, 400_000, 20_000.0) == pytest.approx(30.0)
    assert study_view.eta_s(1_000_000, 400_000, None) is None


def test_units_read_naturally():
    assert units.duration(42) == "42 s"
    assert units.duration(750) == "12.5 min"
    assert units.duration(3 * 3600) == "3 h"
    assert units.count(1_741_000_000) == "1.74B"
    assert units.rate(12_345.6) == "12.3k tokens/s"


def test_skipped_cells_count_as_ended_and_say_why():
    """B=16 ends censored at its whole budget, so B=32 is skipped: its trials count as ended, the
    study reaches 100% once B=4 ends, and the grid says why the cell never ran."""
    from cbscore.study import StudySpec, TrialRecord, plan

    spec = StudySpec.from_dict(dict(name="v", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 100_000}],
                                    batch_sizes=[4, 8, 16, 32], b_ref=8, context_tokens=32,
                                    search={"kind": "grid", "lrs": [0.01]}))

    def rec(t, status, **kw):
        return TrialRecord(trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role,
                           batch_size=t.batch_size, lr=t.lr, status=status, **kw)

    [ref] = plan(spec, [], 0).start
    records = [rec(ref, "finished", final_eval_loss=3.0, eval_steps=(390,), eval_losses=(3.0,), tokens=99_840)]
    started = plan(spec, records, 0).start  # B=4 and B=16
    records += [rec(t, "censored", tokens=199_680, last_step=390) if t.batch_size == 16
                else rec(t, "reached", steps_to_target=700.0, tokens=89_600) for t in started]
    view = study_view.study_view(spec, records, now_s=0)
    key = ("tiny-0.1M_D100K", 32)
    assert view.states[key] == "skipped" and "could only end censored" in view.hover[key]
    assert (view.ended, view.planned, view.progress) == (4, 4, 1.0)
    assert view.counts["skipped"] == 1 and view.grid_tokens == 100_000 + 3 * 200_000

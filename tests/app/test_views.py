"""The pure pieces behind the pages: form text ↔ spec, fit results → chart inputs, cell states."""

from __future__ import annotations

import math

import pytest

from app import fit_view, spec_form, study_view, units
from cbscore.analysis import StepsRow
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


def test_the_form_sets_stop_far_rates_and_keeps_a_specs_experimental_block_without_showing_it():
    base = load_preset("demo").to_dict()
    values = spec_form.form_values(base)
    assert not [k for k in values if any(x in k for x in ("predict", "lr_prior", "prune_at_equal_tokens"))]
    assert spec_form.build_spec(base, {**values, "stop_far_rates": True}).stop_far_rates
    assert not spec_form.build_spec(base, {**values, "stop_far_rates": False}).stop_far_rates
    # A spec (a pasted YAML) with the rules that failed the criteria keeps them through the form.
    ruled = {**base, "experimental": {"predict": True, "lr_prior": None, "prune_at_equal_tokens": True}}
    spec = spec_form.build_spec(ruled, spec_form.form_values(ruled))
    assert spec.experimental.predict and spec.experimental.prune_at_equal_tokens
    assert not spec_form.build_spec(base, values).experimental.predict


def test_the_chained_fields_go_from_the_form_into_the_spec_and_back():
    base = load_preset("demo").to_dict()
    values = {**spec_form.form_values(base), "search.kind": "chained", "search.chain_exponent": 0.3,
              "search.bracket_ratio": 3.0, "search.extension_gain": 0.2, "search.max_extensions": 4,
              "search.reference_rates": "grid", "search.bracket_min_batch_size": 32, "search.narrow_rates": 2}
    spec = spec_form.build_spec(base, values)
    s = spec.search
    assert (s.kind, s.chain_exponent, s.bracket_ratio, s.extension_gain, s.max_extensions, s.reference_rates,
            s.bracket_min_batch_size, s.narrow_rates) == ("chained", 0.3, 3.0, 0.2, 4, "grid", 32, 2)
    assert {k: v for k, v in spec_form.form_values(spec.to_dict()).items() if k.startswith("search.")} == {
        k: v for k, v in values.items() if k.startswith("search.")}
    from cbscore.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        spec_form.build_spec(base, {**values, "search.bracket_ratio": 1.0})
    assert err.value.field == "search.bracket_ratio" and "1.0" in str(err.value)
    with pytest.raises(ConfigError) as err:
        spec_form.build_spec(base, {**values, "search.narrow_rates": 4})
    assert err.value.field == "search.narrow_rates" and "4" in str(err.value)


def test_no_narrow_cells_is_0_on_the_form_and_none_in_the_spec():
    base = load_preset("demo").to_dict()
    values = {**spec_form.form_values(base), "search.kind": "chained"}
    assert values["search.bracket_min_batch_size"] == 0 and values["search.narrow_rates"] == 3
    assert spec_form.build_spec(base, values).search.bracket_min_batch_size is None


def test_a_pasted_specs_chain_centre_and_local_exponent_fill_the_form_and_its_replicate_cells_are_kept():
    """``chain_centre`` and ``local_exponent`` are form fields: a pasted spec's fill them and the form's
    change wins; the absolute ``replicate_batch_sizes`` and ``replicates`` are not shown, and the
    pasted values reach the built spec unchanged."""
    base = load_preset("demo").to_dict()
    base["search"] = {**base["search"], "kind": "chained", "chain_centre": "vertex", "local_exponent": True,
                      "replicate_batch_sizes": [4, 32], "replicates": 2}
    values = spec_form.form_values(base)
    assert (values["search.chain_centre"], values["search.local_exponent"]) == ("vertex", True)
    assert not [k for k in values if "replicate_batch_sizes" in k or k == "search.replicates"]
    s = spec_form.build_spec(base, values).search
    assert (s.chain_centre, s.local_exponent, s.replicate_batch_sizes, s.replicates) == ("vertex", True, (4, 32), 2)
    s = spec_form.build_spec(base, {**values, "search.chain_centre": "best", "search.local_exponent": False}).search
    assert (s.chain_centre, s.local_exponent) == ("best", False)


def test_every_field_on_the_launch_form_has_its_doc_as_help():
    """Each widget value the form keeps is a spec field whose help is its docstring (target_rule is
    the form's own choice, explicit target losses or not)."""
    from app import local_form
    from cbscore.study.spec_docs import spec_field_doc

    values = {**spec_form.form_values(load_preset("demo").to_dict()),
              **local_form.local_form_values(load_preset("local-demo").to_dict())}
    fields = sorted(set(values) - {"target_rule"})
    assert "search.narrow_rates" in fields and "decay.horizon_high" in fields and "local.epsilon" in fields
    for name in fields:
        help_text = spec_form.field_help(name)
        assert help_text.startswith(f"`{name}`: {spec_field_doc(name)}"), name
        assert len(spec_field_doc(name)) > 20, name


def test_the_form_and_cbs_study_fields_say_the_same_words(capsys):
    import json

    from cbs import main as cbs_main

    assert cbs_main(["study", "fields", "--json"]) == 0
    cli = {r["name"]: r["doc"] for r in json.loads(capsys.readouterr().out)}
    for name in ("budget_margin", "search.narrow_rates", "decay.horizon_high", "local.epsilon", "data.source"):
        assert spec_form.field_help(name).split("\n\n")[0] == f"`{name}`: {cli[name]}", name


def test_the_budget_margin_help_says_what_the_paper_presets_set():
    """Once hand-written, the help said the paper presets use 0.25; they set 0.5, as the field's doc says."""
    help_text = spec_form.field_help("budget_margin")
    assert load_preset("paper-chinchilla").budget_margin == 0.5
    assert "The paper presets set 0.5" in help_text and "0.25" not in help_text


def test_a_help_adds_how_the_form_reads_the_field_below_its_doc():
    assert spec_form.field_help("search.lrs").endswith("\n\nComma-separated, e.g. `0.001, 0.00316, 0.01`.")
    assert "CBS_DATA_ROOTS" in spec_form.field_help("data.source")
    assert spec_form.field_help("data.source").startswith("`data.source`: `builtin` (public-domain English corpus")


def test_planned_cells_add_up_to_the_estimate():
    spec = load_preset("demo")
    cells = spec_form.planned_cells(spec)
    n_settings = len(spec.resolve_settings())
    assert len(cells) == estimate(spec).cells == n_settings * len(spec.batch_sizes)
    assert sum(c["trials"] for c in cells) == estimate(spec).trials == len(cells) * len(spec.search.lrs)
    # Reference trials spend (1 + margin)·D tokens: the target is the reference cell's fitted loss at D,
    # and S(B_ref) is their crossing of it, so they train past D (DESIGN.md §1).
    first = spec.resolve_settings()[0]
    ref = next(c for c in cells if c["role"].startswith("reference") and c["setting"] == first.setting_id)
    budget = int((1 + spec.budget_margin) * first.tokens)
    assert spec.budget_margin == 0.25 and ref["budget per trial (tokens)"] == budget == 62_500
    assert ref["budget per trial (steps)"] == budget // (spec.b_ref * spec.context_tokens)


def test_budget_rules_read_as_the_planner_applies_them():
    """DESIGN.md §1, "Budgets that cannot bias B*": (1 + margin)·D tokens below B_ref and at it (the
    reference runs cross their cell's loss at D), (1 + margin)·S steps above it; the fallback multiple
    of D only with explicit targets."""
    spec = load_preset("demo").replace(batch_sizes=(1, 2, 4), b_ref=2, budget_margin=0.5)
    assert [spec_form.budget_rule(spec, b) for b in (1, 2, 4)] == [
        "1.5·D tokens", "1.5·D tokens (the reference runs)", "1.5·S(smaller B) steps (at most 1.5·S(B_ref))"]
    targets = {s.setting_id: 4.0 for s in spec.resolve_settings()}
    explicit = spec.replace(target_losses=targets, budget_multiple=3.0)
    assert spec_form.budget_rule(explicit, 1) == "3·D tokens (fallback: explicit targets)"
    assert spec_form.budget_rule(explicit, 4) == ("3·D tokens until a smaller B reaches the target, then "
                                                  "1.5·S(smaller B) steps")


def test_simulation_rows_and_summary_read_a_report():
    report = {
        "seeds": 4, "settings": [{
            "setting": "s", "cbs_truth": 400.0, "cbs_grid_median": 396.0, "cbs_study_median": 390.0,
            "cbs_study_p05": 350.0, "cbs_study_p95": 430.0, "bias_vs_truth": -0.025, "bias_vs_grid": -0.015,
            "fit_failures": 1, "censored_cells": [4096], "skipped_cells": [64, 128]}],
        "tokens_study_mean": 2.5e9, "tokens_fixed_budget_grid": 1e10, "tokens_share_of_fixed_budget_grid": 0.25,
        "tokens_grid_to_target_mean": 4e9, "gpu_hours_study": 12.5, "gpu_hours_fixed_budget_grid": 50.0,
        "gpu_hours_note": "H100 SXM dense bf16 peak at 40% MFU"}
    (row,) = spec_form.simulation_rows(report)
    assert (row["B* truth"], row["B* study"], row["study vs truth"]) == (400.0, 390.0, -0.025)
    assert (row["study B* 5%"], row["study B* 95%"]) == (350.0, 430.0)
    assert row["notes"] == "fit refused in 1 seed(s); censored (lower bounds) at B = 4096; skipped B = 64, 128"
    assert spec_form.simulation_summary(report) == (
        "Tokens: the study spends 2.5B (mean over 4 simulated studies), 25% of the fixed-budget grid's 10B; the "
        "full grid run to each trial's target would spend 4B. GPU-hours (H100 SXM dense bf16 peak at 40% MFU): "
        "study 12.5, fixed-budget grid 50.")


def test_best_trial_of_a_cell_is_the_fewest_steps_and_censored_gives_a_floor():
    rows = [StepsRow.from_mapping(r) for r in (
        {"setting": "s", "batch_size": 64, "steps": 900.0, "outcome": "reached", "lr": 0.01},
        {"setting": "s", "batch_size": 64, "steps": 700.0, "outcome": "reached", "lr": 0.003},
        {"setting": "s", "batch_size": 64, "steps": "", "outcome": "diverged", "lr": 0.03},
        {"setting": "s", "batch_size": 128, "steps": 300.0, "outcome": "censored"},
    )]
    best = fit_view.best_trials(rows)
    assert list(best) == [("s", 64)] and best[("s", 64)].lr == 0.003
    assert fit_view.censored_floors(rows) == {("s", 128): 300.0}
    # The study export leaves steps empty and gives budget_steps; S(B) > the smallest budget.
    rows += [StepsRow(setting="s", batch_size=256, outcome="censored", budget_steps=90),
             StepsRow(setting="s", batch_size=256, outcome="censored", budget_steps=80)]
    assert fit_view.censored_floors(rows) == {("s", 128): 300.0, ("s", 256): 80.0}


def test_a_points_hover_names_its_best_trials_rates_and_run():
    from cbscore.analysis import analyze_table

    rows = [StepsRow(setting="s", batch_size=b, steps=1000.0 * (1 + 500 / b), lr=0.01, beta2=0.95, tau=12.5,
                     run_id=f"run{b:09d}x") for b in (64, 128, 256, 512)]
    rows.append(StepsRow(setting="s", batch_size=64, steps=9000.0, lr=0.03, run_id="slower"))
    (curve,) = fit_view.setting_curves(analyze_table(rows, bootstrap=0), rows)
    point = next(p for p in curve.points if p.batch_size == 64)
    assert point.run_id == "run000000064x"  # the fewer steps of the cell's two trials
    assert "lr 0.01, β2 0.95, τ 12.5" in point.hover and "run run000000064" in point.hover
    assert fit_view.batch_sizes(rows) == [64, 128, 256, 512]


def _steps_rows(settings, batch_sizes=(64, 128, 256, 512, 1024, 2048, 4096)):
    """A steps table on exact curves S = 1000·(1 + B_noise/B) for (name, N, D, B_noise) settings."""
    return [{"setting": name, "batch_size": b, "steps": 1000.0 * (1 + b_noise / b), "n_params": n, "tokens": d,
             "outcome": "reached"} for name, n, d, b_noise in settings for b in batch_sizes]


def test_censored_cells_are_drawn_as_lower_bounds_at_their_cap():
    from cbscore.analysis import analyze_table

    rows = [StepsRow.from_mapping(r) for r in _steps_rows([("s", 1e8, 2e9, 500.0)])]
    rows += [StepsRow(setting="s", batch_size=8192, outcome="censored", budget_steps=1700, n_params=1e8, tokens=2e9),
             StepsRow(setting="s", batch_size=8192, outcome="diverged", n_params=1e8, tokens=2e9)]
    table = analyze_table(rows, bootstrap=0)
    (curve,) = fit_view.setting_curves(table, rows)
    (bound,) = [p for p in curve.points if p.censored]
    assert (bound.batch_size, bound.steps) == (8192, 1700.0)
    assert "censored at ≥ 1,700 steps, a lower bound" in bound.hover and "1 diverged" in bound.hover
    assert any("batch size 8192: no trial reached the target (1 censored, 1 diverged, 0 other); censored at "
               "≥ 1,700 steps, a lower bound" in e for e in table.errors)


def test_law_rows_give_one_row_per_group_with_paper_and_raw_coefficients():
    from cbscore.analysis import analyze_table

    # (N1, D1), (N1, D2), (N2, D1): a law in D at N1 and a law in N at D1, nothing pooled.
    rows = _steps_rows([("a", 1e8, 2e9, 400.0), ("b", 1e8, 8e9, 800.0), ("c", 4e8, 2e9, 500.0)])
    table = analyze_table(rows, bootstrap=50)
    laws = {r["law"]: r for r in fit_view.law_rows(table)}
    assert list(laws) == ["B* = c·N^α at fixed D = 2B tokens", "B* = c·D^β at fixed N = 100M"]
    n_row, d_row = laws.values()
    assert n_row["settings"] == "a, c" and d_row["settings"] == "a, b"
    (n_law,) = table.scaling.n_laws
    assert n_row["c"] == pytest.approx(n_law.coef * 1e6**n_law.exponent) and n_row["c units"] == "N in millions"
    assert n_row["c (raw)"] == n_law.coef and n_row["β (D exponent)"] is None
    (d_law,) = table.scaling.d_laws
    assert d_row["c"] == pytest.approx(d_law.coef * 1e9**d_law.exponent) and d_row["c units"] == "D in billions"
    assert d_row["α interval"] is None and d_row["β interval"] == "—"  # two settings: no interval
    lines = fit_view.fitted_laws(table, "n")
    assert [line.label.split(":")[0] for line in lines] == ["this data, at fixed D = 2B tokens"]


def test_paper_rows_and_verdict_for_a_study_without_laws_at_fixed_n_or_d():
    from cbscore.analysis import analyze_table

    rows = _steps_rows([("a", 1e8, 2e9, 400.0), ("b", 2e8, 4e9, 600.0), ("c", 4e8, 8e9, 900.0)])
    table = analyze_table(rows, bootstrap=50)
    rows = {r["exponent"]: r for r in fit_view.paper_rows(table)}
    assert [r["paper"] for r in rows.values()] == [0.47, 0.087, 0.47]
    chinchilla = rows["α: N and D together (D ∝ N, Chinchilla)"]
    assert chinchilla["this study"] == pytest.approx(table.scaling.chinchilla[0].exponent)
    assert chinchilla["from"] == "law in N with D ∝ N at 20 tokens per parameter, 3 settings"
    assert rows["β: D at fixed N"]["this study"] is None
    verdict, sentence = fit_view.paper_verdict(table)
    assert verdict == "inconclusive" and "no interval for the D-exponent at fixed N" in sentence


@pytest.mark.parametrize("cbs, expected", [
    (1.2 * 256, True), (1.09 * 1.2 * 256, True), (1.11 * 1.2 * 256, False), (None, False), (float("inf"), False),
])
def test_b_star_within_10_percent_of_its_floor_mostly_reflects_b_ref(cbs, expected):
    assert fit_view.b_ref_dominates(cbs, 256, 0.2) is expected


def test_b_ref_dominated_settings_are_named():
    from cbscore.analysis import analyze_table

    # B* = 1.2·256 + 0.2·B_noise: B_noise = 100 gives 327 (6% above 307), B_noise = 1000 gives 507.
    rows = _steps_rows([("small-noise", None, None, 100.0), ("large-noise", None, None, 1000.0)])
    for row in rows:
        row.pop("n_params"), row.pop("tokens")
    table = analyze_table(rows, bootstrap=0)
    assert fit_view.b_ref_dominated_settings(table) == ["small-noise"]
    assert fit_view.B_REF_DOMINATED_CAPTION == "B_ref is above B_noise here; B* mostly reflects B_ref"


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
    """Below B_ref every cell gets the same token budget, (1 + margin)·D: B=8 ends censored after
    all of it, and again when re-run at twice it, so B=16 is skipped (tokens to target never fall
    as B grows). Its trials count as ended, the study reaches 100%, and the grid says why the cell
    never ran."""
    from cbscore.study import StudySpec, TrialRecord, plan

    spec = StudySpec.from_dict(dict(name="v", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 100_000}],
                                    batch_sizes=[4, 8, 16, 32], b_ref=32, context_tokens=32,
                                    search={"kind": "grid", "lrs": [0.01]}))

    def rec(t, status, **kw):
        return TrialRecord(trial_id=t.trial_id, cell_id=t.cell_id, setting_id=t.setting_id, role=t.role,
                           batch_size=t.batch_size, lr=t.lr, status=status, **kw)

    [ref] = plan(spec, [], 0).start
    assert ref.max_tokens == 125_000  # 1.25·D: the reference runs cross their cell's loss at D past D
    ref_steps = 100_000 // (32 * 32)  # 97 steps of 1,024 tokens: D
    last = 125_000 // (32 * 32)  # 122
    records = [rec(ref, "finished", final_eval_loss=2.9, eval_steps=(ref_steps, last), eval_losses=(3.0, 2.9),
                   tokens=last * 32 * 32, last_step=last)]
    [cell4] = plan(spec, records, 0).start
    assert (cell4.batch_size, cell4.max_tokens) == (4, 125_000)  # 1.25·D
    records.append(rec(cell4, "reached", steps_to_target=700.0, tokens=700 * 4 * 32, last_step=700))
    [cell8] = plan(spec, records, 0).start
    assert (cell8.batch_size, cell8.max_tokens) == (8, 125_000)
    budget_steps = 125_000 // (8 * 32)  # 488
    records.append(rec(cell8, "censored", tokens=budget_steps * 8 * 32, last_step=budget_steps,
                       eval_steps=(100, budget_steps), eval_losses=(3.6, 3.2)))
    # Every rate of B=8 censored: the planner runs it once more at twice its budget before it counts.
    view = study_view.study_view(spec, records, now_s=0)
    assert view.states[("tiny-0.1M_D100K", 16)] == "planned" and (view.ended, view.planned) == (3, 5)
    [again] = plan(spec, records, 0).start
    assert (again.trial_id, again.max_tokens) == (cell8.trial_id + ".x2", 250_000)
    records.append(rec(again, "censored", tokens=2 * budget_steps * 8 * 32, last_step=2 * budget_steps,
                       eval_steps=(100, 2 * budget_steps), eval_losses=(3.6, 3.1)))
    view = study_view.study_view(spec, records, now_s=0)
    key = ("tiny-0.1M_D100K", 16)
    assert view.states[key] == "skipped" and "could only end censored" in view.hover[key]
    assert view.states[("tiny-0.1M_D100K", 8)] == "censored"
    # ended: the reference, B=4, B=8 and its re-run, and skipped B=16; planned: the same five
    assert (view.ended, view.planned, view.progress) == (5, 5, 1.0)
    # The target: the reference run's loss at D = 97.66 steps, on the line in log step through its evaluations.
    at_d = 3.0 - 0.1 * math.log(100_000 / (32 * 32) / ref_steps) / math.log(last / ref_steps)
    assert view.targets == {"tiny-0.1M_D100K": pytest.approx(at_d)}
    # Every trial's budget is 1.25·D, the reference trial's too.
    assert view.counts["skipped"] == 1 and view.grid_tokens == 4 * 125_000


def test_simulations_start_from_the_papers_laws_only_for_the_papers_models():
    assert spec_form.default_truth(load_preset("paper-chinchilla")) == "paper"
    assert spec_form.default_truth(load_preset("demo")) == "b_noise"
    # The paper's fixed-D law gives 85M B* = 914 sequences: not above (1 + r)·B_ref at B_ref = 1024.
    spec = load_preset("paper-fixed-d")
    assert spec_form.default_truth(spec.replace(b_ref=1024, batch_sizes=(512, 1024, 2048))) == "b_noise"


def test_running_trial_throughput_shows_total_per_device_and_mfu():
    two_ranks = {"perf/tokens_per_s": ([10, 20], [90_000.0, 100_000.0]),
                 "perf/tokens_per_s_per_device": ([10, 20], [45_000.0, 50_000.0]),
                 "perf/mfu": ([10, 20], [0.38, 0.412])}
    assert study_view.throughput_text(two_ranks) == "100k tokens/s (50k per device × 2) · MFU 41.2%"
    one_cpu = {"perf/tokens_per_s": ([10], [6_123.0])}
    assert study_view.throughput_text(one_cpu) == "6.12k tokens/s · MFU n/a"
    # a run from before the per-device metric: the spec's devices_per_trial splits the total
    assert study_view.throughput_text(one_cpu, devices=2) == "6.12k tokens/s (3.06k per device × 2) · MFU n/a"
    assert study_view.throughput_text({}) == "— · MFU n/a"


def test_the_loss_curve_overlay_takes_hundreds_of_trials_and_caps_at_its_limit():
    from app.study_view import MAX_OVERLAY, overlay_records
    from cbscore.study import TrialRecord

    def rec(i: int, status: str = "reached") -> TrialRecord:
        return TrialRecord(trial_id=f"s.t{i}", cell_id=f"a.b{4 << (i % 4)}", setting_id="a" if i % 3 else "b",
                           role="trial", batch_size=4 << (i % 4), lr=1e-3 * (1 + i % 5), status=status, seed=i % 2)

    many = [rec(i) for i in range(150)]
    assert len(overlay_records(many, setting=None)) == 150
    assert {r.setting_id for r in overlay_records(many, setting="b")} == {"b"}
    assert {r.batch_size for r in overlay_records(many, setting=None, batch_sizes=[8, 16])} == {8, 16}
    assert len(overlay_records([rec(i) for i in range(MAX_OVERLAY + 100)], setting=None)) == MAX_OVERLAY == 500
    assert overlay_records(many + [rec(999, "diverged")], setting=None, outcomes=["diverged"])[0].trial_id == "s.t999"


def test_trend_and_noise_rows_name_the_first_doubling_of_the_reproduce_table():
    # The committed reproduce table (issue 38): only ln S(4)/S(8) rises with D; the noise by source is
    # the one the simulator's --noise lab draws.
    from pathlib import Path

    from app import fit_view
    from cbscore.analysis import analyze_table, read_steps_csv

    path = Path(__file__).resolve().parents[2] / "docs/results/reproduce/steps.csv"
    table = analyze_table(read_steps_csv(path), b_ref=4, overhead=0.2, bootstrap=100)
    rows = [r for r in fit_view.trend_rows(table) if r["law"].startswith("law in D")]
    assert [(r["ratio"], r["trend"]) for r in rows] == [
        ("ln S(4)/S(8)", "rises"), ("ln S(8)/S(16)", "none seen"), ("ln S(16)/S(32)", "none seen"),
        ("every doubling beyond the first, pooled", "none seen")]
    assert rows[0]["slope per e-fold"] == pytest.approx(0.084, abs=0.001) and rows[0]["dof"] == 5
    noise = {r["part"].split(" (")[0]: r["sd of ln S"] for r in fit_view.noise_rows(table)}
    assert noise["rate-level"] == pytest.approx(0.030, abs=0.001)
    assert noise["seed × cell"] == pytest.approx(0.034, abs=0.001)
    assert noise["seed-common"] == pytest.approx(0.066, abs=0.001)
    assert len(fit_view.doubling_rows(table)) == 18
    assert {r["B*"] for r in fit_view.other_law_rows(table)} == {"without B_ref", "empirical B*"}


@pytest.mark.parametrize("values, fmt", [
    ((4.37, 4.04, 4.81), "%.2f"),  # a tiny study's B* and its interval: not "4 [4, 5]"
    ((56.4, 48.9, 70.2), "%.1f"),
    ((164.1, 153.6, 1234.0), "%.0f"),
    ((0.52, None, math.nan, 12.0), "%.3f"),
    ((None, math.inf), "%.0f"),
])
def test_batch_sizes_get_three_significant_digits_at_the_smallest(values, fmt):
    assert units.batch_format(values) == fmt
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if finite and min(finite) < 100:  # the smallest value keeps three significant digits
        assert float(fmt % min(finite)) == pytest.approx(float(f"{min(finite):.3g}"))


def test_a_reason_shared_by_settings_is_said_once():
    notes = ["setting 'a': its best reference run logged no gns/b_simple (launch with gns_micro_batch_size)",
             "setting 'b': no target yet (its reference runs have not finished)",
             "setting 'c': its best reference run logged no gns/b_simple (launch with gns_micro_batch_size)",
             "calibration needs a fitted setting"]
    assert fit_view.reasons_once(notes) == [
        "settings 'a', 'c': its best reference run logged no gns/b_simple (launch with gns_micro_batch_size)",
        "setting 'b': no target yet (its reference runs have not finished)",
        "calibration needs a fitted setting"]
    assert fit_view.reasons_once([]) == []


def test_the_previews_rates_line_names_narrow_chained_cells():
    demo = load_preset("demo")
    chained = demo.replace(search={**demo.to_dict()["search"], "kind": "chained"})
    assert "every other cell three rates (×/÷ 2) around its neighbour's best × (B/B′)^0.5, at most" in (
        spec_form.rates_line(chained))
    narrow = chained.replace(search={**chained.to_dict()["search"], "bracket_min_batch_size": 8, "narrow_rates": 2})
    assert "(B/B′)^0.5 (below B = 8: two, ×/÷ √2), at most" in spec_form.rates_line(narrow)
    alone = chained.replace(search={**chained.to_dict()["search"], "bracket_min_batch_size": 8, "narrow_rates": 1})
    assert "(B/B′)^0.5 (below B = 8: the centre alone), at most" in spec_form.rates_line(alone)

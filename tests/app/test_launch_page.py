"""The Launch page through AppTest: validation messages, the preview, and launching.

The launch itself is patched at the workers boundary (``workers.query.api.launch_study``): what the
page hands over is checked, nothing is enqueued.
"""

from __future__ import annotations

import dataclasses
import math
from unittest import mock

import pytest

from cbscore.study import StudySpec, estimate, load_preset

PREVIEW = "FormSubmitter:launch-Preview"
LAUNCH = "FormSubmitter:launch-Launch study"


@pytest.fixture
def launch(app_test, empty_env):
    app_test.run()
    assert not app_test.exception
    return app_test


def _errors(at) -> list[str]:
    return [e.value for e in at.error]


def _demo_form() -> dict:
    from app import spec_form

    return spec_form.form_values(load_preset("demo").to_dict())


def test_form_starts_from_the_demo_preset(launch):
    demo = load_preset("demo")
    assert launch.text_input(key="launch.name").value == "demo"
    assert launch.text_input(key="launch.batch_sizes").value == ", ".join(map(str, demo.batch_sizes))
    assert launch.text_area(key="launch.settings").value == _demo_form()["settings"]
    assert launch.selectbox(key="launch.recipe").value == demo.recipe
    assert launch.number_input(key="launch.budget_margin").value == demo.budget_margin


def test_negative_batch_size_is_named_with_its_value(launch):
    launch.text_input(key="launch.batch_sizes").set_value("8, -16, 32")
    launch.button(key=PREVIEW).click().run()
    assert _errors(launch) == ["**Batch sizes** (`batch_sizes`): must be a positive integer, but got `-16`."]
    assert not launch.metric  # no preview of a spec that is not valid


def test_unknown_model_and_bad_token_count_are_named(launch):
    launch.text_area(key="launch.settings").set_value("tiny-0.1M, 1M\nhuge-9B, 2M")
    launch.button(key=PREVIEW).click().run()
    (error,) = _errors(launch)
    assert "`settings[1].model`" in error and "'huge-9B'" in error
    launch.text_area(key="launch.settings").set_value("tiny-0.1M, lots")
    launch.button(key=PREVIEW).click().run()
    assert _errors(launch) == ["**Settings (model, tokens)** (`settings[0].tokens`): must be a count like "
                               "2000000, 2M or 1.741B, but got `'lots'`."]


def test_b_ref_outside_the_batch_sizes_is_refused(launch):
    launch.number_input(key="launch.b_ref").set_value(48)
    launch.button(key=PREVIEW).click().run()
    (error,) = _errors(launch)
    assert error.startswith("**Reference batch size B_ref** (`b_ref`): must be one of batch_sizes") and "48" in error


def test_preview_counts_cells_trials_and_compute(launch):
    demo = load_preset("demo")
    settings = demo.resolve_settings()
    launch.button(key=PREVIEW).click().run()
    assert not _errors(launch)
    metrics = {m.label: m.value for m in launch.metric}
    n_cells = len(settings) * len(demo.batch_sizes)
    assert metrics["Settings"] == str(len(settings)) and metrics["Cells"] == str(n_cells)
    assert metrics["Trials"] == str(n_cells * len(demo.search.lrs))
    cells = launch.dataframe[0].value
    assert len(cells) == n_cells
    reference = cells[cells["role"] == "reference: sets the target"]
    assert list(reference["B (sequences)"]) == [demo.b_ref] * len(settings)
    # A reference trial spends (1 + margin)·D tokens (DESIGN.md §1, "Budgets that cannot bias B*": the
    # target is the reference cell's fitted loss at D, which its runs must be able to cross) ...
    assert list(reference["budget per trial (tokens)"]) == [int((1 + demo.budget_margin) * s.tokens) for s in settings]
    rule = f"{1 + demo.budget_margin:g}·D tokens (the reference runs)"
    assert list(reference["budget rule"]) == [rule] * len(settings)
    # ... a trial below B_ref (1 + margin)·D, and one above B_ref (1 + margin)·S(smaller B) steps,
    # at most (1 + margin)·S(B_ref) with S(B_ref) = D/(B_ref·T) steps.
    for s in settings:
        rows = cells[cells["setting"] == s.setting_id].set_index("B (sequences)")
        for b in demo.batch_sizes:
            if b < demo.b_ref:
                assert rows.loc[b, "budget per trial (tokens)"] == int((1 + demo.budget_margin) * s.tokens)
            elif b > demo.b_ref:
                ref_steps = s.tokens // (demo.b_ref * demo.context_tokens)
                assert rows.loc[b, "budget per trial (steps)"] == math.ceil((1 + demo.budget_margin) * ref_steps)
                assert rows.loc[b, "budget rule"].startswith(f"{1 + demo.budget_margin:g}·S(smaller B) steps")


def test_yaml_paste_fills_the_form_and_bad_yaml_is_named(launch):
    demo = load_preset("demo")
    sizes = (demo.b_ref, 2 * demo.b_ref, 4 * demo.b_ref)
    spec = demo.replace(name="pasted", batch_sizes=sizes, recipe="paper_table")
    launch.text_area(key="launch.yaml_text").set_value(spec.to_yaml())
    launch.button(key="launch.yaml_load").click().run()
    assert launch.text_input(key="launch.name").value == "pasted"
    assert launch.text_input(key="launch.batch_sizes").value == ", ".join(map(str, sizes))
    assert launch.selectbox(key="launch.recipe").value == "paper_table"
    launch.text_area(key="launch.yaml_text").set_value("name: x\nkind: custom\nbatch_size: [1]\n")
    launch.button(key="launch.yaml_load").click().run()
    (error,) = _errors(launch)
    assert error.startswith("**batch_size** (`batch_size`): is not a study field")


def test_launch_hands_the_spec_to_the_workers_and_opens_the_study(launch):
    launch.text_input(key="launch.name").set_value("my-study")
    with mock.patch("workers.query.api.launch_study", return_value="my-study") as submit:
        launch.button(key=LAUNCH).click().run()
    submit.assert_called_once()
    (spec,), kwargs = submit.call_args
    assert isinstance(spec, StudySpec) and kwargs == {"force": False, "owner": "local"}  # no sign-in: the one local user
    assert spec == load_preset("demo").replace(name="my-study")
    assert launch.session_state["studies.selected"] == "my-study"
    assert [t.value for t in launch.title] == ["Studies"]  # switched to the study's live page


def _yaml_spec() -> StudySpec:
    """A spec pasted over the demo preset: its name, batch sizes and rates all differ from the demo's."""
    demo = load_preset("demo")
    return demo.replace(name="pasted-rates", batch_sizes=(demo.b_ref, 2 * demo.b_ref),
                        search=dataclasses.replace(demo.search, lrs=(0.003, 0.01, 0.03)))


def test_the_preview_names_the_learning_rates_it_will_run(launch):
    launch.text_input(key="launch.search.lrs").set_value("0.003, 0.01, 0.03")
    launch.button(key=PREVIEW).click().run()
    assert any(m.value.startswith("**Learning rates:** 0.003, 0.01, 0.03 in every cell") for m in launch.markdown)


def test_a_submit_of_the_form_from_before_the_last_fill_launches_nothing_then_the_fill(launch):
    """Issue 42 (finding 4): Launch clicked while the browser still showed the preset's rates under
    the pasted YAML's name. The browser sends the older fill's name with the form: nothing is
    launched, the form goes back to the YAML's values and its plan is shown; a second click
    launches exactly the YAML."""
    spec = _yaml_spec()
    launch.text_area(key="launch.yaml_text").set_value(spec.to_yaml())
    launch.button(key="launch.yaml_load").click().run()
    assert launch.text_input(key="launch.filled_from").value.startswith("the pasted YAML (fill ")
    # what a browser that had drawn only the name field of the new fill sends (the field is
    # disabled: AppTest sets it as the browser's submit does, through the session)
    launch.session_state["launch.filled_from"] = "preset demo (fill 1)"
    launch.text_input(key="launch.search.lrs").set_value(_demo_form()["search.lrs"])
    with mock.patch("workers.query.api.launch_study", return_value="pasted-rates") as submit:
        launch.button(key=LAUNCH).click().run()
        submit.assert_not_called()
        assert [w.value for w in launch.warning if w.value.startswith("Not launched: the browser sent the form")]
        assert launch.text_input(key="launch.search.lrs").value == "0.003, 0.01, 0.03"
        assert any(m.value.startswith("**Learning rates:** 0.003, 0.01, 0.03") for m in launch.markdown)
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    assert launched == spec


def test_launch_with_yaml_pasted_but_not_loaded_launches_the_yaml(launch):
    spec = _yaml_spec()
    launch.text_area(key="launch.yaml_text").set_value(spec.to_yaml())
    with mock.patch("workers.query.api.launch_study", return_value="pasted-rates") as submit:
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    assert launched == spec and launched.search.lrs == (0.003, 0.01, 0.03)


def test_launch_with_invalid_yaml_pasted_launches_nothing(launch):
    launch.text_area(key="launch.yaml_text").set_value("name: x\nkind: custom\nbatch_size: [1]\n")
    with mock.patch("workers.query.api.launch_study", return_value="demo") as submit:
        launch.button(key=LAUNCH).click().run()
    submit.assert_not_called()
    assert any(e.startswith("**batch_size** (`batch_size`): is not a study field") for e in _errors(launch))


def test_a_yaml_box_left_as_it_was_at_the_last_fill_does_not_override_the_form(launch):
    """A preset chosen after a YAML was loaded: the box still holds the YAML, but it is older than
    the fill, so Launch starts the preset as the form shows it."""
    launch.text_area(key="launch.yaml_text").set_value(_yaml_spec().to_yaml())
    launch.button(key="launch.yaml_load").click().run()
    launch.selectbox(key="launch.preset").set_value("paper-chinchilla").run()
    launch.selectbox(key="launch.preset").set_value("demo").run()
    with mock.patch("workers.query.api.launch_study", return_value="demo") as submit:
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    assert launched == load_preset("demo")


def test_study_past_the_sanity_limit_is_not_launched_without_force(launch):
    launch.number_input(key="launch.max_trials").set_value(10)
    with mock.patch("workers.query.api.launch_study", return_value="demo") as submit:
        launch.button(key=LAUNCH).click().run()
    submit.assert_not_called()
    trials = estimate(load_preset("demo")).trials
    assert any(e.startswith(f"Not launched: {trials} trials exceed max_trials=10") for e in _errors(launch))


def test_form_keeps_its_values_when_another_page_was_open(launch):
    launch.text_input(key="launch.name").set_value("kept")
    launch.button(key=PREVIEW).click().run()
    launch.switch_page("app_pages/import_table.py").run()
    launch.switch_page("app_pages/launch.py").run()
    assert not launch.exception
    assert launch.text_input(key="launch.name").value == "kept"
    assert launch.text_input(key="launch.batch_sizes").value == _demo_form()["batch_sizes"]


# --------------------------------------------------------------------------- recipe and budgets
def test_recipe_rule_and_budget_margin_reach_the_spec(launch):
    launch.selectbox(key="launch.recipe").set_value("paper_table")
    launch.number_input(key="launch.budget_margin").set_value(0.5)
    launch.text_input(key="launch.name").set_value("my-study")
    with mock.patch("workers.query.api.launch_study", return_value="my-study") as submit:
        launch.button(key=LAUNCH).click().run()
    (spec,), _ = submit.call_args
    assert spec == load_preset("demo").replace(name="my-study", recipe="paper_table", budget_margin=0.5)


def test_bad_budget_margin_and_fallback_budget_are_named_with_their_value(launch):
    launch.number_input(key="launch.budget_margin").set_value(12.0)
    launch.button(key=PREVIEW).click().run()
    assert _errors(launch) == ["**Budget margin** (`budget_margin`): must be a number in [0, 10], but got `12.0`."]
    assert not launch.metric
    launch.number_input(key="launch.budget_margin").set_value(0.25)
    launch.number_input(key="launch.budget_multiple").set_value(0.5)
    launch.button(key=PREVIEW).click().run()
    assert _errors(launch) == ["**Fallback budget (× D)** (`budget_multiple`): must be at least 1 (a trial gets at "
                               "least D tokens), but got `0.5`."]


def _recipe_table(at):
    (table,) = [d.value for d in at.dataframe if "EWA τ (middle)" in d.value.columns]
    return table


def test_preview_lists_beta2_and_tau_per_cell_with_the_tau_horizon_as_a_share_of_d(launch):
    from cbscore.recipe import half_life_steps, spec_recipe

    demo = load_preset("demo")
    launch.button(key=PREVIEW).click().run()
    table = _recipe_table(launch)
    assert len(table) == len(demo.resolve_settings()) * len(demo.batch_sizes)
    for s in demo.resolve_settings():
        for b in demo.batch_sizes:
            row = table[(table["setting"] == s.setting_id) & (table["B (sequences)"] == b)].iloc[0]
            # the demo's recipe is `fixed`: one β2/τ per B for the whole study, at the study's reference D
            # (its two D differ), which spec_recipe takes over the spec's settings
            r = spec_recipe(demo, batch_size=b, d_tokens=s.tokens)
            assert row["β2"] == r.beta2 and row["EWA τ (middle)"] == r.ewa_taus[1]
            share = half_life_steps(r.ewa_taus[1]) * b * demo.context_tokens / s.tokens
            assert row["τ half-life (share of D)"] == pytest.approx(share)
    # `fixed`: the same β2 and τ at a batch size in every setting, whatever its D.
    assert (table.groupby("B (sequences)")[["β2", "EWA τ (middle)"]].nunique() == 1).all().all()
    # The fixed rule keeps the paper's horizons as shares of the reference D, a small share of every D: no warning.
    assert table["τ half-life (share of D)"].max() < 0.5
    assert not [w for w in launch.warning if "EWA τ's half-life" in w.value]


def test_paper_table_on_tiny_runs_warns_that_tau_averages_over_the_whole_run(launch):
    launch.selectbox(key="launch.recipe").set_value("paper_table")
    launch.button(key=PREVIEW).click().run()
    # τ = 0.9995 (the paper's at B ≤ 512) keeps 1,386 steps, far more than a demo run.
    table = _recipe_table(launch)
    assert set(table.loc[table["B (sequences)"] <= 512, "EWA τ (middle)"]) == {0.9995}
    (warning,) = [w.value for w in launch.warning if "EWA τ's half-life" in w.value]
    assert warning.startswith("The middle EWA τ's half-life is over 50% of D in tiny-0.1M_D")


# --------------------------------------------------------------------------- simulate this design
SIMULATE = "FormSubmitter:launch.simulate-Simulate"


def _simulation(at):
    (table,) = [d.value for d in at.dataframe if "B* study" in d.value.columns]
    return table.set_index("setting")


def test_simulating_the_demo_with_one_b_noise_reports_the_planners_b_star(launch):
    from app import spec_form
    from cbscore.study.simulate import SimConfig, simulate

    demo = load_preset("demo")
    launch.button(key=PREVIEW).click().run()
    launch.radio(key="launch.sim.truth").set_value("b_noise")
    launch.number_input(key="launch.sim.b_noise").set_value(8.0)
    launch.number_input(key="launch.sim.seeds").set_value(2)
    launch.button(key=SIMULATE).click().run()
    assert not _errors(launch) and not launch.exception
    table = _simulation(launch)
    assert any(m.value.startswith("**2 simulated studies** against B_noise = 8 in every setting")
               for m in launch.markdown)
    truth = (1 + demo.overhead) * demo.b_ref + demo.overhead * 8.0  # the closed form, DESIGN.md §1
    assert list(table.index) == [s.setting_id for s in demo.resolve_settings()]
    assert list(table["B* truth"]) == pytest.approx([truth] * len(table))
    # The page runs the library's simulator: same spec, truth, σ and seeds, same numbers.
    report = simulate(demo, spec_form.uniform_truth(demo, 8.0), SimConfig(noise_sigma=0.1), seeds=2).to_json_dict()
    for s in report["settings"]:
        assert table.loc[s["setting"], "B* study"] == pytest.approx(s["cbs_study_median"], nan_ok=True)
        assert table.loc[s["setting"], "B* full grid"] == pytest.approx(s["cbs_grid_median"], nan_ok=True)
    (line,) = [c.value for c in launch.caption if c.value.startswith("Tokens: the study spends")]
    assert "mean over 2 simulated studies" in line and "GPU-hours (H100 SXM dense bf16 peak at 40% MFU)" in line
    # The preview and the result stay while the page reruns.
    launch.run()
    assert len(_simulation(launch)) == len(table) and launch.metric


def test_simulating_a_paper_preset_defaults_to_the_papers_laws(launch):
    launch.button(key=PREVIEW).click().run()
    # Tiny models: the paper's laws give B* below (1 + r)·B_ref, so the default is one B_noise.
    assert launch.radio(key="launch.sim.truth").value == "b_noise"
    launch.selectbox(key="launch.preset").set_value("paper-fixed-d").run()
    assert not launch.metric  # a new spec is previewed when asked
    launch.button(key=PREVIEW).click().run()
    assert launch.radio(key="launch.sim.truth").value == "paper"
    launch.number_input(key="launch.sim.noise").set_value(0.0)
    launch.number_input(key="launch.sim.seeds").set_value(1)
    launch.button(key=SIMULATE).click().run()
    assert not _errors(launch)
    table = _simulation(launch)
    spec = load_preset("paper-fixed-d")
    for s in spec.resolve_settings():
        paper = 621.3 * (s.n_params / 1e6) ** 0.087  # fixed D (Zhang et al. 2025, §4)
        assert table.loc[s.setting_id, "B* truth"] == pytest.approx(paper)
        # Without noise the planner's savings leave B* within 2% of the truth (the grid's coarseness).
        assert abs(table.loc[s.setting_id, "study vs truth"]) < 0.02


def test_simulating_against_an_uploaded_truth_csv_and_errors_are_messages(launch):
    demo = load_preset("demo")
    ids = [s.setting_id for s in demo.resolve_settings()]
    launch.button(key=PREVIEW).click().run()
    launch.radio(key="launch.sim.truth").set_value("csv")
    launch.button(key=SIMULATE).click().run()
    assert [i.value for i in launch.info] == ["Upload a truth CSV to simulate against it."]
    csv = "setting,s_min,b_noise\n" + "".join(f"{sid},100,{4 * (i + 1)}\n" for i, sid in enumerate(ids))
    launch.file_uploader(key="launch.sim.csv").set_value(("truth.csv", csv.encode(), "text/csv"))
    launch.number_input(key="launch.sim.seeds").set_value(1)
    launch.button(key=SIMULATE).click().run()
    assert not _errors(launch)
    table = _simulation(launch)
    expected = [(1 + demo.overhead) * demo.b_ref + demo.overhead * 4 * (i + 1) for i in range(len(ids))]
    assert list(table["B* truth"]) == pytest.approx(expected)
    # A CSV without one of the settings: a message naming the upload and the setting.
    launch.file_uploader(key="launch.sim.csv").set_value(("truth.csv", csv.rsplit(ids[-1], 1)[0].encode(), "text/csv"))
    launch.button(key=SIMULATE).click().run()
    (error,) = _errors(launch)
    assert error.startswith(f"truth.csv: no curve for setting '{ids[-1]}'")
    assert not [d for d in launch.dataframe if "B* study" in d.value.columns]  # not beside an old result
    # A design the simulator cannot run: named with its field and value, never a traceback.
    launch.radio(key="launch.search.kind").set_value("optuna")
    launch.button(key=PREVIEW).click().run()
    launch.radio(key="launch.sim.truth").set_value("b_noise")
    launch.button(key=SIMULATE).click().run()
    assert _errors(launch) == ["**Search** (`search.kind`): the simulator runs grid and chained searches only, "
                               "but got `'optuna'`."]
    assert not launch.exception


def test_forecast_from_an_unknown_study_is_named_with_its_value(launch):
    spec = load_preset("demo").replace(name="next", forecast_from="nope")
    launch.text_area(key="launch.yaml_text").set_value(spec.to_yaml())
    launch.button(key="launch.yaml_load").click().run()
    launch.button(key=PREVIEW).click().run()
    (error,) = _errors(launch)
    assert "`forecast_from`" in error and "names no study in the tracking store" in error and "'nope'" in error
    assert not launch.metric


def test_forecast_from_a_calibrated_study_chooses_the_batch_sizes_in_the_preview(app_test, app_env):
    import re

    from tests.app.conftest import STUDY
    from tests.app.store_seed import expected_calibration, spec_for

    app_test.run()
    app_test.switch_page("app_pages/launch.py").run()
    # the seeded study: B_noise 64, 128, 256 and B̂ = B_noise/3, B_ref = 32; the same settings. Its first
    # two settings' censored B = 256 stays in their fits as a lower bound and pulls their B_noise down
    # (their ratios to B̂ below 3, the last one's 3), so c, the geometric mean, is 2.50.
    spec = spec_for("next").replace(forecast_from=STUDY)
    app_test.text_area(key="launch.yaml_text").set_value(spec.to_yaml())
    app_test.button(key="launch.yaml_load").click().run()
    app_test.button(key=PREVIEW).click().run()
    assert not _errors(app_test), _errors(app_test)
    (info,) = [i.value for i in app_test.info if "forecast_from" in i.value]
    (c,) = [float(v) for v in re.findall(r"calibration c = ([0-9.]+)", info)]
    assert c == pytest.approx(expected_calibration(app_env), abs=0.005) and c == pytest.approx(2.50, abs=0.005)
    # B_ref/4 … the first B_ref·2^k ≥ 4 × the largest calibrated B_noise, 4·c·256/3 = 853
    assert "batch sizes [8, 16, 32, 64, 128, 256, 512, 1024]" in info
    cells = [d.value for d in app_test.dataframe if "B (sequences)" in d.value.columns][0]  # the planned cells
    assert sorted(set(cells["B (sequences)"])) == [8, 16, 32, 64, 128, 256, 512, 1024]


# --------------------------------------------------------------------------- devices and noise scale
def test_devices_per_trial_and_noise_scale_split_reach_the_spec(launch):
    launch.number_input(key="launch.devices_per_trial").set_value(2)
    launch.number_input(key="launch.gns_micro_batch_size").set_value(1)
    launch.selectbox(key="launch.gns_cells").set_value("reference")
    launch.text_input(key="launch.name").set_value("split")
    with mock.patch("workers.query.api.launch_study", return_value="split") as submit:
        launch.button(key=LAUNCH).click().run()
    assert not _errors(launch)
    (spec,), _ = submit.call_args
    assert spec == load_preset("demo").replace(name="split", devices_per_trial=2, gns_micro_batch_size=1,
                                               gns_cells="reference")


def test_devices_that_do_not_divide_a_batch_size_are_named_and_nothing_is_launched(launch):
    launch.number_input(key="launch.devices_per_trial").set_value(3)
    with mock.patch("workers.query.api.launch_study") as submit:
        launch.button(key=LAUNCH).click().run()
    (error,) = _errors(launch)
    assert error.startswith("**Devices per trial** (`devices_per_trial`): must divide every batch size") and "`3`" in error
    assert not submit.called and not launch.metric
    launch.number_input(key="launch.devices_per_trial").set_value(1)
    launch.number_input(key="launch.gns_micro_batch_size").set_value(load_preset("demo").b_ref)
    launch.button(key=PREVIEW).click().run()
    (error,) = _errors(launch)
    assert error.startswith("**Noise-scale split (sequences)** (`gns_micro_batch_size`): must be smaller than b_ref")

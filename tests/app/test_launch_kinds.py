"""The Launch page's search and study kinds of issues 40 and 45, through AppTest: the chained
bracket with its fields, the ``schedule`` study with its ``decay`` fields, and no experimental
rule on the form.

The launch itself is patched at the workers boundary (``workers.query.api.launch_study``), as in
``test_launch_page.py``: what the page hands over is checked, nothing is enqueued.
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest

from cbscore.study import StudySpec, estimate, load_preset, plan
from cbscore.study.budgets import cell_size
from tests.app.test_launch_page import LAUNCH, PREVIEW, launch  # noqa: F401 (the fixture)


def _chained_demo(name: str = "demo") -> StudySpec:
    """The demo preset with the chained bracket the tests below set on the form: the reference cell
    runs the grid (three rates × one seed here; every other cell three), a narrower chain."""
    demo = load_preset("demo")
    return demo.replace(name=name, seeds=(0, 1), search=dataclasses.replace(
        demo.search, kind="chained", reference_rates="grid", lrs=(0.003, 0.006, 0.012, 0.024),
        chain_exponent=0.4, bracket_ratio=1.5, extension_gain=0.05, max_extensions=1))


def _set_chained(at) -> None:
    at.radio(key="launch.search.kind").set_value("chained")
    at.text_input(key="launch.search.lrs").set_value("0.003, 0.006, 0.012, 0.024")
    at.text_input(key="launch.seeds").set_value("0, 1")
    at.number_input(key="launch.search.chain_exponent").set_value(0.4)
    at.number_input(key="launch.search.bracket_ratio").set_value(1.5)
    at.number_input(key="launch.search.extension_gain").set_value(0.05)
    at.number_input(key="launch.search.max_extensions").set_value(1)
    at.selectbox(key="launch.search.reference_rates").set_value("grid")


def test_the_search_offers_the_chained_bracket_with_the_field_docs_as_help(launch):

    radio = launch.radio(key="launch.search.kind")
    assert list(radio.options) == ["Grid", "Chained bracket", "Optuna"]
    help_text = launch.number_input(key="launch.search.chain_exponent").help
    assert help_text.startswith("`search.chain_exponent`: Chained search: a cell's centre rate is its neighbour's")
    assert "Malladi et al. 2022" in help_text
    # read from the field's docstring (a known sentence of it), not written twice
    assert launch.number_input(key="launch.search.extension_gain").help.endswith(
        "an optimum at the centre leaves both edges about 10% behind.\n\nAllowed: a finite number in [0, 1].")
    # literals as code, on one line: ``bracket`` in the source reads `bracket` on the page
    assert launch.selectbox(key="launch.search.reference_rates").help.startswith(
        "`search.reference_rates`: Chained search: what the reference cell runs. `bracket` (the default): three "
        "rates `c/bracket_ratio, c, c·bracket_ratio` around the geometric middle `c` of `lrs`;")
    # the chained bracket's narrow cells (issue 40's "past 3×") are on the form, with their docs
    assert launch.number_input(key="launch.search.bracket_min_batch_size").help.startswith(
        "`search.bracket_min_batch_size`: Chained search")
    assert launch.number_input(key="launch.search.bracket_min_batch_size").help.endswith("0 = `None`.")
    assert list(launch.selectbox(key="launch.search.narrow_rates").options) == ["3", "2", "1"]
    assert "`c/√ratio` and `c·√ratio`" in launch.selectbox(key="launch.search.narrow_rates").help
    # how a settled cell centres the next (issue 40's second round: criteria 1 and 2 met) is on the form
    assert list(launch.selectbox(key="launch.search.chain_centre").options) == ["best", "vertex"]
    assert launch.selectbox(key="launch.search.chain_centre").help.startswith("`search.chain_centre`: Chained search")
    assert "[-0.5, 1]" in launch.checkbox(key="launch.search.local_exponent").help
    # every help on the form is its field's doc: the budget margin's says what the paper presets set
    assert "The paper presets set 0.5" in launch.number_input(key="launch.budget_margin").help
    keys = _widget_keys(launch)
    assert "launch.search.chain_exponent" in keys
    # the rules that failed the criteria (issue 40: the ``experimental`` block) stay off the page
    assert not [k for k in keys if "predict" in k or "equal_tokens" in k or "lr_prior" in k]


def _widget_keys(at) -> list[str]:
    """Every widget key the page drew."""
    out = []
    for kind in ("number_input", "selectbox", "checkbox", "radio", "text_input", "multiselect", "toggle"):
        out.extend(w.key for w in getattr(at, kind))
    return out


def test_a_chained_preview_counts_unequal_cells_and_says_what_the_chain_runs(launch):
    from cbscore.study.chained import describe_chained

    _set_chained(launch)
    launch.button(key=PREVIEW).click().run()
    assert not launch.error, [e.value for e in launch.error]
    expected = _chained_demo()
    metrics = {m.label: m.value for m in launch.metric}
    est = estimate(expected, 20_000)
    settings, sizes = expected.resolve_settings(), expected.batch_sizes
    # reference cell: the 4-rate grid × 2 seeds; every other cell: 3 rates × 2 seeds
    assert est.trials == len(settings) * (4 * 2 + (len(sizes) - 1) * 3 * 2)
    assert metrics["Trials"] == str(est.trials)
    cells = launch.dataframe[0].value
    assert sum(cells["trials"]) == est.trials
    ref = cells[cells["B (sequences)"] == expected.b_ref]
    assert set(ref["trials"]) == {8} and set(cells[cells["B (sequences)"] != expected.b_ref]["trials"]) == {6}
    assert [cell_size(expected, b) for b in sizes] == [8, 6, 6, 6, 6]
    (code,) = [c.value for c in launch.code if c.value.startswith("chained search:")]
    assert code == "\n".join(describe_chained(expected))
    assert "(B/B_neighbour)^0.4" in code and "at most 1 per cell" in code and "more than 5%" in code


def test_a_chained_spec_launched_from_the_page_launches_exactly_the_chained_plan(launch):
    _set_chained(launch)
    launch.text_input(key="launch.name").set_value("chained-demo")
    with mock.patch("workers.query.api.launch_study", return_value="chained-demo") as submit:
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    expected = _chained_demo("chained-demo")
    assert launched == expected
    first, want = plan(launched, [], 0.0), plan(expected, [], 0.0)
    assert repr(first) == repr(want)
    # the chained plan's first wave: the reference cell's grid, every rate × seed, at B_ref only
    n_settings = len(expected.resolve_settings())
    assert {t.batch_size for t in first.start} == {expected.b_ref}
    assert sorted((t.lr, t.seed) for t in first.start) == sorted(
        (lr, s) for lr in expected.search.lrs for s in expected.seeds for _ in range(n_settings))


def test_the_form_shows_no_experimental_rule_and_a_pasted_block_is_kept(launch):
    keys = {w.key for w in launch.checkbox}
    assert "launch.stop_far_rates" in keys
    assert not [k for k in keys if any(x in k for x in ("predict", "prune_at_equal_tokens", "lr_prior"))]
    assert not [w for w in launch.number_input if "lr_prior" in (w.key or "")]
    pasted = load_preset("demo").replace(name="with-rules", experimental={"predict": True, "prune_at_equal_tokens": True})
    launch.text_area(key="launch.yaml_text").set_value(pasted.to_yaml())
    launch.button(key="launch.yaml_load").click().run()
    with mock.patch("workers.query.api.launch_study", return_value="with-rules") as submit:
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    assert launched == pasted and launched.experimental.predict and launched.experimental.prune_at_equal_tokens


def test_a_pasted_spec_from_before_keeps_its_rules_under_their_new_place(launch):
    old = load_preset("demo").to_dict() | {"name": "old-rules", "prune_at_equal_tokens": True}
    import yaml

    launch.text_area(key="launch.yaml_text").set_value(yaml.safe_dump(old, sort_keys=False))
    with pytest.warns(FutureWarning, match="prune_at_equal_tokens moved to experimental.prune_at_equal_tokens"):
        launch.button(key="launch.yaml_load").click().run()
    with mock.patch("workers.query.api.launch_study", return_value="old-rules") as submit:
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    assert launched.experimental.prune_at_equal_tokens and launched.to_dict()["experimental"]["prune_at_equal_tokens"]


def test_the_schedule_kind_starts_from_its_preset_and_previews_the_decay_branches_tokens(launch):
    from app import units
    from cbscore.study.decay_plan import decay_grid_tokens, describe_decay

    launch.segmented_control(key="launch.kind").set_value("schedule").run()
    assert launch.text_input(key="launch.filled_from").value.startswith("preset ablation-schedule")
    launch.multiselect(key="launch.decay.schedules").set_value(["constant_ewa", "wsd"])
    launch.number_input(key="launch.decay.decay_fraction").set_value(0.1)
    launch.number_input(key="launch.decay.horizon_high").set_value(2.0)
    launch.button(key=PREVIEW).click().run()
    assert not launch.error, [e.value for e in launch.error]
    preset = load_preset("ablation-schedule")
    expected = preset.replace(decay=dataclasses.replace(preset.decay, schedules=("constant_ewa", "wsd"),
                                                        decay_fraction=0.1, horizon_high=2.0))
    (code,) = [c.value for c in launch.code if c.value.startswith("schedules ")]
    assert code == "\n".join(describe_decay(expected, units.count))
    assert "wsd decay branches (f = 0.1 to 0.1·lr)" in code and "cosine runs 0;" in code
    metrics = {m.label: m.value for m in launch.metric}
    assert metrics["Tokens (at most)"] == units.count(decay_grid_tokens(expected))
    with mock.patch("workers.query.api.launch_study", return_value=expected.name) as submit:
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    assert launched == expected


def test_a_bad_decay_field_is_named_with_its_value(launch):
    launch.segmented_control(key="launch.kind").set_value("schedule").run()
    launch.multiselect(key="launch.decay.schedules").set_value([])
    launch.button(key=PREVIEW).click().run()
    assert any("decay.schedules" in e.value and "must list one schedule" in e.value for e in launch.error)


def test_the_relative_chained_fields_set_on_the_page_reach_the_preview_and_the_launched_spec(launch):
    """Issue 40's relative fields on the form: the top cells bracketed (the cells below them narrow)
    and the end cells replicated, for any grid; the demo's B = 2..32 with B_ref = 2 keeps the bracket
    at 16 and 32 and replicates 4 and 32 (B_ref is never replicated)."""
    _set_chained(launch)
    launch.number_input(key="launch.search.bracket_top_cells").set_value(2)
    launch.selectbox(key="launch.search.narrow_rates").set_value(2)
    launch.checkbox(key="launch.search.replicate_ends").check()
    launch.text_input(key="launch.name").set_value("relative-demo")
    # Both forms of the narrow cells at once: refused on the page, naming the field and both values.
    launch.number_input(key="launch.search.bracket_min_batch_size").set_value(8)
    launch.button(key=PREVIEW).click().run()
    assert any("search.bracket_top_cells" in e.value and "bracket_min_batch_size=8" in e.value
               for e in launch.error), [e.value for e in launch.error]
    launch.number_input(key="launch.search.bracket_min_batch_size").set_value(0)
    launch.button(key=PREVIEW).click().run()
    assert not launch.exception and not launch.error, [e.value for e in launch.error]
    expected = _chained_demo("relative-demo")
    expected = expected.replace(search=dataclasses.replace(expected.search, bracket_top_cells=2, narrow_rates=2,
                                                           replicate_ends=True))
    (code,) = [c.value for c in launch.code if c.value.startswith("chained search:")]
    assert "narrow cells (B < 16: 4, 8) start with 2 rates" in code
    assert "replicates: B = 4, 32 each run 1 more trial(s)" in code
    assert any("B = 4, 32 each run 1 more at the best rate" in m.value for m in launch.markdown)
    with mock.patch("workers.query.api.launch_study", return_value="relative-demo") as submit:
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    assert launched == expected and launched.replicated_batch_sizes == (4, 32) and launched.bracket_floor == 16


def test_the_simulators_best_combination_is_set_on_the_page_without_yaml(launch):
    """How a settled cell centres the next (``chain_centre``, ``local_exponent``) is on the form, so
    the simulator's best combination (docs/results/cheaper-search/chained/README.md, "Fresh draws")
    is five widgets, not a YAML: the dry run and the Preview say the fitted optimum and the local
    slope, and Launch hands over exactly that spec."""
    _set_chained(launch)
    assert launch.selectbox(key="launch.search.chain_centre").value == "best"
    assert launch.checkbox(key="launch.search.local_exponent").value is False
    launch.selectbox(key="launch.search.chain_centre").set_value("vertex")
    launch.checkbox(key="launch.search.local_exponent").check()
    launch.number_input(key="launch.search.bracket_top_cells").set_value(2)
    launch.selectbox(key="launch.search.narrow_rates").set_value(2)
    launch.checkbox(key="launch.search.replicate_ends").check()
    launch.text_input(key="launch.name").set_value("combination-demo")
    launch.button(key=PREVIEW).click().run()
    assert not launch.exception and not launch.error, [e.value for e in launch.error]
    expected = _chained_demo("combination-demo")
    expected = expected.replace(search=dataclasses.replace(
        expected.search, chain_centre="vertex", local_exponent=True, bracket_top_cells=2, narrow_rates=2,
        replicate_ends=True))
    (code,) = [c.value for c in launch.code if c.value.startswith("chained search:")]
    assert "centred at c = (its neighbour's fitted optimum)·(B/B_neighbour)^(the slope of the last two cells" in code
    assert any("around its neighbour's fitted optimum × (B/B′)^the slope of the two cells before it" in m.value
               for m in launch.markdown), [m.value for m in launch.markdown]
    with mock.patch("workers.query.api.launch_study", return_value="combination-demo") as submit:
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    assert launched == expected


def test_narrow_chained_cells_set_on_the_page_reach_the_preview_and_the_launched_spec(launch):
    """Issue 40's narrow cells: below ``search.bracket_min_batch_size`` a chained cell starts with
    ``search.narrow_rates`` rates; set on the form, they are what the Preview describes and what
    Launch hands over (0 on the form is ``None``, every cell bracketed: tests/app/test_views.py)."""
    _set_chained(launch)
    launch.number_input(key="launch.search.bracket_min_batch_size").set_value(8)
    launch.selectbox(key="launch.search.narrow_rates").set_value(2)
    launch.text_input(key="launch.name").set_value("narrow-demo")
    launch.button(key=PREVIEW).click().run()
    assert not launch.exception and not launch.error, [e.value for e in launch.error]
    expected = _chained_demo("narrow-demo")
    expected = expected.replace(search=dataclasses.replace(expected.search, bracket_min_batch_size=8, narrow_rates=2))
    (code,) = [c.value for c in launch.code if c.value.startswith("chained search:")]
    assert "narrow cells (B < 8: 4) start with 2 rates c/√ratio, c·√ratio" in code  # B_ref = 2 is bracketed
    with mock.patch("workers.query.api.launch_study", return_value="narrow-demo") as submit:
        launch.button(key=LAUNCH).click().run()
    (launched,), _ = submit.call_args
    assert launched == expected and launched.search.bracket_min_batch_size == 8

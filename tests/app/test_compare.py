"""Compare studies on the Scaling laws page (issue 25): two real studies in one MLflow store, their B*
side by side at each study's own rule, the choice kept in the URL."""

from __future__ import annotations

import pytest

from tests.app.conftest import _store_env
from tests.app.store_seed import expected_fit, spec_for


@pytest.fixture(scope="module")
def two_studies(tmp_path_factory):
    """Studies ``alpha`` and ``beta`` (two settings each; beta's B_noise four times alpha's); returns
    ``(env, {study: {setting: SeededSetting}})``."""
    from tests.app.conftest import environment
    from tests.app.store_seed import seed_study
    from workers.tracking import Tracker

    env = _store_env(tmp_path_factory.mktemp("compare-store"))
    with environment(env):
        tracker = Tracker(env["CBS_TRACKING_URI"], env["CBS_ARTIFACT_ROOT"])
        seeded = {"alpha": seed_study(tracker, spec_for("alpha", n_settings=2), b_noise_per_setting=[32.0, 64.0]),
                  "beta": seed_study(tracker, spec_for("beta", n_settings=2), b_noise_per_setting=[128.0, 256.0])}
    return env, seeded


def test_a_comparison_from_the_url_draws_both_studies_at_their_own_rule(two_studies, app_test, monkeypatch):
    from tests.app.conftest import _clear_caches

    env, seeded = two_studies
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _clear_caches()
    at = app_test
    at.query_params["study"] = "alpha"
    at.query_params["compare"] = "beta,nope,alpha"  # an unknown study and the page's own are dropped
    at.run()
    at.switch_page("app_pages/scaling.py")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.selectbox(key="scaling.study").value == "alpha"
    assert at.multiselect(key="scaling.compare").value == ["beta"]
    frames = [d.value for d in at.dataframe if "study" in d.value.columns and "B*" in d.value.columns]
    (table,) = frames
    got = {(r["study"], r["setting"]): r["B*"] for _, r in table.iterrows()}
    want = {(study, setting): expected_fit(s).cbs(0.2, 32) for study, settings in seeded.items()
            for setting, s in settings.items()}
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=0.01), key
    # beta's B_noise is four times alpha's at each setting: its B* is larger at every setting
    for setting in seeded["alpha"]:
        assert got[("beta", setting)] > got[("alpha", setting)]
    # one chart per variable with a colour per study
    import json

    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    names = {t.get("name", "") for fig in charts for t in fig["data"]}
    assert {"alpha: B* of each setting", "beta: B* of each setting"} <= names
    # clearing the choice clears the URL's
    at.multiselect(key="scaling.compare").set_value([]).run()
    assert "compare" not in at.query_params


def test_the_curves_page_overlays_the_normalised_curves_of_studies_with_the_same_b_ref(two_studies, app_test,
                                                                                     monkeypatch):
    import json

    from tests.app.conftest import _clear_caches

    env, seeded = two_studies
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _clear_caches()
    at = app_test
    at.query_params["study"] = "beta"
    at.query_params["compare"] = "alpha"
    at.run()
    at.switch_page("app_pages/curves.py")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.multiselect(key="curves.compare").value == ["alpha"]
    (fig,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "curves.compare" in c.proto.id]
    labels = {t["name"].rsplit(": fit a + b/B", 1)[0] for t in fig["data"] if t.get("name", "").endswith(": fit a + b/B")}
    assert len(labels) == 4 and {label.split(": ")[0] for label in labels} == {"alpha", "beta"}, labels

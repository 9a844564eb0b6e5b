"""What one simulated study found, setting by setting (:mod:`cbscore.study.simulate`).

After the study, ``S(B)`` per batch size is read off its trials by :attr:`SimConfig.estimator
<cbscore.study.sim_trials.SimConfig.estimator>` (the paper's minimum over rates beside) and fitted
as the pages fit it.

Three B* are reported per setting: the **truth** (the paper's rule on the truth curve,
:meth:`cbscore.study.sim_truth.Truth.cbs`), the **full grid** (every learning rate at every batch size run to its own crossing, no budget, no pruning:
what the savings are measured against) and the **study** (what the planner's rules give).
With :attr:`SimConfig.bootstrap <cbscore.study.sim_trials.SimConfig.bootstrap>` the study's trials
also go through the public analysis (:func:`cbscore.analysis.analyze_setting`, seeds included, and
:func:`cbscore.analysis.fit_scaling_laws` across settings, as ``cbs fit`` calls them): whether each
95% interval covers the truth is what the report counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from cbscore.analysis import (
    EvalHistory,
    SettingAnalysis,
    TrialSteps,
    analyze_setting,
    cbs_closed_form,
    first_crossing,
    fit_scaling_laws,
    fit_steps,
    fit_window,
    measure_points,
    project_pruned,
)
from cbscore.errors import FitError
from cbscore.study.plan_result import skipped_cells
from cbscore.study.sim_report import LawOutcome, SettingOutcome
from cbscore.study.sim_trials import SimTrials
from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.trials import TERMINAL, TrialRecord


def _analyse(trials: Sequence[TrialSteps], spec: StudySpec, estimator: str) -> tuple[float | None, str | None, bool]:
    """B* of one setting's trials as the pages compute it: ``(B*, why refused, a cell at an edge)``."""
    return _fit_points(measure_points(trials, estimator=estimator), spec)


def _analyse_both(trials: Sequence[TrialSteps], spec: StudySpec, estimator: str
                  ) -> tuple[tuple[float | None, str | None, bool], float | None]:
    """:func:`_analyse` of the trials under ``estimator`` and the B* of the paper's minimum (``"min"``)
    beside it, from one measurement: every point holds the minimum's ``S`` as ``steps_min``, the very
    number ``measure_points(estimator="min")`` gives as its ``steps`` (the geometric mean of each seed's
    fewest steps), with the same lower bounds."""
    points = measure_points(trials, estimator=estimator)
    return _fit_points(points, spec), _fit_points(points, spec, minimum=True)[0]


def _fit_points(points: Sequence, spec: StudySpec, minimum: bool = False) -> tuple[float | None, str | None, bool]:
    """B* fitted through measured points (their ``steps``, or with ``minimum`` their ``steps_min``):
    ``(B*, why refused, a cell at an edge)``."""
    measured = [(p, p.steps_min if minimum else p.steps) for p in points]
    measured = [(p, s) for p, s in measured if s is not None]
    bounds = [(p.batch_size, p.steps_lower_bound) for p in points if p.steps_lower_bound is not None]
    edge = any(p.lr_at_edge for p, _ in measured)
    try:
        fit = fit_steps([p.batch_size for p, _ in measured], [s for _, s in measured], lower_bounds=bounds)
    except FitError as exc:
        return None, str(exc), edge
    return float(cbs_closed_form(fit.b_noise, b_ref=spec.b_ref, overhead=spec.overhead)), None, edge


def _study_trials(records: Mapping[str, TrialRecord], sid: str, target: float | None,
                  project: bool) -> list[TrialSteps]:
    """The steps table of one setting, as ``cbs study fit`` builds it from MLflow; ``project``: the
    spec's ``prune_at_equal_tokens`` (the only rule whose stopped trials stand in by projection)."""
    out = []
    for r in records.values():
        if r.setting_id != sid or r.status not in TERMINAL:
            continue
        if r.role == "reference" and r.status == "finished":
            # A reference run to (1 + margin)·D: its crossing of the target read off its evaluations.
            c = None if target is None else first_crossing(r.eval_steps, r.eval_losses, target)
            out.append(TrialSteps(batch_size=r.batch_size, outcome="reached", steps=c, lr=r.lr, seed=r.seed)
                       if c is not None else
                       TrialSteps(batch_size=r.batch_size, outcome="censored", budget_steps=float(r.last_step),
                                  lr=r.lr, seed=r.seed))
        elif r.status == "reached":
            out.append(TrialSteps(batch_size=r.batch_size, outcome="reached", steps=r.steps_to_target,
                                  lr=r.lr, seed=r.seed))
        elif r.status == "censored":
            out.append(TrialSteps(batch_size=r.batch_size, outcome="censored", budget_steps=float(max(r.last_step, 1)),
                                  lr=r.lr, seed=r.seed))
        else:
            out.append(TrialSteps(batch_size=r.batch_size, outcome=r.status, lr=r.lr, seed=r.seed))
    # Trials stopped at equal tokens: steps to target projected from their curves against the
    # cell's leader, as `cbs study fit` does from MLflow's histories.
    if project and any(t.outcome == "pruned" for t in out):
        histories = [EvalHistory(batch_size=r.batch_size, steps=r.eval_steps, losses=r.eval_losses, lr=r.lr,
                                 seed=r.seed, outcome=r.status, role=r.role)
                     for r in records.values() if r.setting_id == sid and r.status in ("reached", "pruned")
                     and len(r.eval_steps) >= 2]
        out = project_pruned(out, histories)
    return out


def _grid_trials(spec: StudySpec, sim: SimTrials, setting: Setting, target: float,
                 study: Sequence[TrialSteps]) -> tuple[list[TrialSteps], int, int, int]:
    """The full grid: every rate at every batch size run to its own crossing (no budget, no
    pruning), the grid extended past an edge by the planner's own rule (``search.lr_extensions``)
    on the grid's complete data; the reference cell is the study's. Returns the trials, their
    tokens, the oracle's tokens (the best trial of each cell and seed; D per seed at B_ref) and the
    fit-window floor: per cell and seed the tokens of the trials the fit reads
    (:func:`cbscore.analysis.fit_window`) to their own stop at the target, and at B_ref D per seed
    for each of the three rates the reference target's fit reads (the best and its neighbours,
    :func:`cbscore.analysis.reference_target`). A rule that measures less than the floor must stand
    in a projection for some crossing the fit reads."""
    base = sorted(spec.search.lrs)
    low = base[1] / base[0] if len(base) > 1 else 2.0
    high = base[-1] / base[-2] if len(base) > 1 else 2.0
    out = [t for t in study if t.batch_size == spec.b_ref]
    tokens = int((1 + spec.budget_margin) * setting.tokens) * len([t for t in out if t.outcome != "diverged"])
    oracle = setting.tokens * len(spec.seeds)
    ref_rates = len({t.lr for t in out if t.outcome != "diverged"})
    floor = setting.tokens * len(spec.seeds) * min(3, max(ref_rates, 1))
    for b in spec.batch_sizes:
        if b == spec.b_ref:
            continue
        rates = list(base)
        cell: dict[float, list[TrialSteps]] = {}
        stop_tokens: dict[tuple[float, int], int] = {}  # (lr, seed) -> tokens to its stop at the target

        def run(lr: float) -> None:
            nonlocal tokens
            cell[lr] = []
            for seed in spec.seeds:
                got = sim.reading(setting, b, lr, seed, target)
                if got is None:
                    cell[lr].append(TrialSteps(batch_size=b, outcome="diverged", lr=lr, seed=seed))
                    tokens += math.ceil(spec.warmup_fraction * setting.tokens)
                elif math.isinf(got[0]):
                    cell[lr].append(TrialSteps(batch_size=b, outcome="censored", budget_steps=1e12, lr=lr, seed=seed))
                else:
                    cell[lr].append(TrialSteps(batch_size=b, outcome="reached", steps=got[0], lr=lr, seed=seed))
                    stop_tokens[(lr, seed)] = int(math.ceil(got[1])) * b * spec.context_tokens
                    tokens += stop_tokens[(lr, seed)]

        for lr in rates:
            run(lr)
        for _ in range(spec.search.lr_extensions):
            added = False
            for seed in spec.seeds:
                reached = [(t.steps, lr) for lr, ts in cell.items() for t in ts if t.seed == seed and t.steps]
                if not reached:
                    continue
                best_lr = min(reached)[1]
                for edge, nxt in ((min(cell), float(f"{min(cell) / low:.3g}")), (max(cell), float(f"{max(cell) * high:.3g}"))):
                    if best_lr == edge and nxt not in cell:
                        run(nxt)
                        added = True
            if not added:
                break
        out += [t for ts in cell.values() for t in ts]
        for seed in spec.seeds:
            stops = [sim.reading(setting, b, lr, seed, target) for lr in cell]
            best = min((g[1] for g in stops if g is not None and math.isfinite(g[1])), default=None)
            if best is not None:
                oracle += int(math.ceil(best)) * b * spec.context_tokens
            reached = [t for ts in cell.values() for t in ts if t.seed == seed and t.outcome == "reached"]
            if reached:
                floor += sum(stop_tokens[(t.lr, seed)] for t in fit_window(reached, sorted(cell)))
    return out, tokens, oracle, floor


def setting_outcomes(spec: StudySpec, sim: SimTrials, records: Mapping[str, TrialRecord], p
                     ) -> tuple[list[SettingOutcome], tuple[LawOutcome, ...]]:
    """Each setting's B* of the truth, the full grid and the study, once the study ``p`` is done;
    with :attr:`SimConfig.bootstrap` also each setting's interval and the scaling laws' exponents
    against the truth's (:func:`law_outcomes`)."""
    out = []
    analyses: dict[str, SettingAnalysis] = {}
    for sid, setting in sim.settings.items():
        cbs_truth = sim.truth[sid].cbs(spec.b_ref, spec.overhead)
        target = p.targets.get(sid)
        study = _study_trials(records, sid, target, spec.experimental.prune_at_equal_tokens)
        cbs_ci = None
        if sim.config.bootstrap:
            # The public analysis of the study's trials, seeds included, as `cbs fit` runs it on a
            # steps table (the target held fixed: the simulated non-reference runs keep no histories).
            analyses[sid] = analyze_setting(sid, study, n_params=setting.n_params, tokens=setting.tokens,
                                            context=spec.context_tokens, b_ref=spec.b_ref, overhead=spec.overhead,
                                            bootstrap=sim.config.bootstrap, seed=sim.seed,
                                            estimator=sim.config.estimator)
            cbs_ci = analyses[sid].cbs_ci
        (cbs_study, error, edge), cbs_study_min = _analyse_both(study, spec, sim.config.estimator)
        censored = tuple(sorted({t.batch_size for t in study if t.outcome == "censored"}
                                - {t.batch_size for t in study if t.outcome == "reached"}))
        cbs_grid = cbs_grid_min = None
        grid_tokens_to_target = oracle = floor = 0
        if target is not None:
            grid, grid_tokens_to_target, oracle, floor = _grid_trials(spec, sim, setting, target, study)
            (cbs_grid, _, _), cbs_grid_min = _analyse_both(grid, spec, sim.config.estimator)
        out.append(SettingOutcome(
            setting_id=sid, cbs_truth=cbs_truth, cbs_grid=cbs_grid, cbs_study=cbs_study, error=error,
            cbs_grid_min=cbs_grid_min, cbs_study_min=cbs_study_min,
            tokens_study=sum(r.tokens for r in records.values() if r.setting_id == sid),
            tokens_grid_to_target=grid_tokens_to_target, tokens_oracle=oracle, tokens_fit_window=floor,
            censored_cells=censored,
            skipped_cells=skipped_cells(p).get(sid, ()), edge=edge, cbs_ci=cbs_ci))
    return out, law_outcomes(spec, sim, analyses)


def law_outcomes(spec: StudySpec, sim: SimTrials, analyses: Mapping[str, SettingAnalysis]) -> tuple[LawOutcome, ...]:
    """Every scaling law that :func:`cbscore.analysis.fit_scaling_laws` fits across the settings the
    study's analysis fitted (from each setting's B* and bootstrap draws, as ``analyze_table`` calls
    it), beside the same law fitted to those settings' true B*: its exponent is the truth the
    interval should cover."""
    fitted = [(sid, a) for sid, a in analyses.items() if a.cbs is not None and a.bootstrap is not None]
    if len(fitted) < 2:
        return ()
    names = [sid for sid, _ in fitted]
    n_params = [sim.settings[sid].n_params for sid in names]
    tokens = [sim.settings[sid].tokens for sid in names]
    laws = fit_scaling_laws(names, n_params, tokens, [a.cbs for _, a in fitted],
                            [a.bootstrap.cbs_samples for _, a in fitted], n_draws=sim.config.bootstrap, seed=sim.seed)
    true = fit_scaling_laws(names, n_params, tokens, [sim.truth[sid].cbs(spec.b_ref, spec.overhead) for sid in names])
    exact_by_group = {(x.variable, x.fixed_name, x.settings): x for x in true.laws}
    out = []
    for law in laws.laws:
        exact = exact_by_group.get((law.variable, law.fixed_name, law.settings))
        if exact is None:  # (the same settings give the same groups; a law the truth lacks has no truth)
            continue
        out.append(LawOutcome(law=_law_name(law), exponent_truth=float(exact.exponent), exponent=float(law.exponent),
                              exponent_ci=law.exponent_ci))
    if laws.joint is not None and true.joint is not None:
        for var, est, ci, exact in (("N", laws.joint.exponent_n, laws.joint.exponent_n_ci, true.joint.exponent_n),
                                    ("D", laws.joint.exponent_d, laws.joint.exponent_d_ci, true.joint.exponent_d)):
            out.append(LawOutcome(law=f"joint B* ∝ N^α·D^β: exponent of {var}", exponent_truth=float(exact),
                                  exponent=float(est), exponent_ci=ci))
    return tuple(out)


def _law_name(law) -> str:
    """A one-variable law in words: its variable and what its settings share."""
    var = "N" if law.variable == "n" else "D"
    fixed = {"tokens": "D", "n_params": "N", "tokens_per_param": "D/N"}.get(law.fixed_name)
    at = f" at {fixed} = {law.fixed_value:.4g}" if fixed and law.fixed_value is not None else ""
    return f"B* ∝ {var}^exponent{at}"

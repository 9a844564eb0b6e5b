"""Launch the schedule: a local study's fitted warm-up trained beside its two controls.

``cbs study warmup NAME`` and the Local CBS page's *Launch the schedule* read the warm-up off the
study's fitted curve (``warmup[rule].plan.batch_schedule`` of :func:`workers.studies.local_fit.local_readout`:
the batch doubles where the local CBS passes twice the current batch, the learning rate ×√2 each
time; Merrill et al. 2025, arXiv 2505.23971, §5), move each switch onto the equal-token grid
(:func:`cbscore.local.on_equal_token_grid`), and extend the study with ``local.warmup_run: true``
and that ``local.warmup_schedule`` (:mod:`cbscore.study.extend`). The study's planner then starts,
per seed, the warm-up, the small-batch control and the large-batch control
(:func:`cbscore.study.local_plan.arm_trial`): ordinary trials of the same study, leased, tracked
and resumed like any other, read back by ``cbs study fit`` (``arms``).

Why an extension of the study, not a study of its own: the arms answer this study's question
with its spec, data, recipe and seeds, and the schedule must be frozen where the study keeps its
history (a new spec version with who asked and when); the extension is one write of the spec,
checked in full first, so bad input changes nothing and a crash after it is finished by the
next runner pass like any extension.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbscore.errors import ConfigError

if TYPE_CHECKING:
    from cbscore.local import LocalStudyReadout

RULES = ("merrill", "noise_aware")


def warmup_patch(fit: LocalStudyReadout, rule: str = "merrill") -> dict:
    """The extension that launches the warm-up of ``fit`` (a local study's readout) by ``rule``'s
    curve: ``{"local": {"warmup_run": True, "warmup_schedule": [...]}}``. Pure; raises a
    ConfigError naming what stands in the way (the Local CBS page shows it as the reason its
    button is disabled)."""
    from cbscore.local import on_equal_token_grid

    if rule not in RULES:
        raise ConfigError("rule", rule, f"must be one of {', '.join(RULES)}")
    if fit.warmup_run:
        raise ConfigError("local.warmup_run", True, f"is set already: the warm-up of {fit.study} and its controls "
                                                    "were launched (their readout is the fit's `arms`)")
    if fit.branches_pending:
        raise ConfigError("branches_pending", fit.branches_pending, "must be 0: wait for every branch to end, so that "
                                                                    "the curve is read off every checkpoint")
    warm = fit.warmup.get(rule)
    if warm is None:
        why = "; ".join(n for n in fit.notes if n.startswith(rule)) or "no curve"
        raise ConfigError(f"curve.{rule}", None, f"must be fitted before its schedule can be launched ({why})")
    if not warm.plan.batch_schedule:
        raise ConfigError(f"warmup.{rule}.batch_schedule", [],
                          f"recommends no switch within D = {fit.total_tokens:,} tokens, so the warm-up would be the "
                          "small-batch control (" + "; ".join(warm.plan.notes) + ")")
    schedule = on_equal_token_grid(warm.plan.batch_schedule, context_tokens=fit.context_tokens,
                                   total_tokens=fit.total_tokens, field=f"warmup.{rule}.batch_schedule")
    return {"local": {"warmup_run": True, "warmup_schedule": [list(e) for e in schedule]}}


def warmup_blocker(fit: LocalStudyReadout, rule: str = "merrill") -> str | None:
    """Why the schedule cannot be launched now (:func:`warmup_patch`'s message), or ``None``."""
    try:
        warmup_patch(fit, rule)
    except ConfigError as exc:
        return str(exc)
    return None


def launch_warmup(name: str, *, rule: str = "merrill", author: str = "", force: bool = False):
    """Extend local study ``name`` with its warm-up and both controls by ``rule``'s curve (fitted
    from MLflow now); returns ``(new spec, changes)``. Bad input raises ConfigError with nothing
    changed."""
    from workers.studies.local_fit import local_fit
    from workers.studies.runner import Runner

    patch = warmup_patch(local_fit(name), rule)
    return Runner().extend(name, patch, author=author, force=force)


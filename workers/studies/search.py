"""Optuna: one study per cell ``(setting, batch size)`` that proposes learning rates.

The studies live in a relational storage (``CBS_OPTUNA_STORAGE``; SQLite under the state
directory by default, PostgreSQL in a shared deployment), named ``{study}/{cell_id}``, so that
``optuna-dashboard <storage URL>`` opens them. The runner *asks* when the planner wants more
trials in a cell (:class:`cbscore.study.AskRequest`) and the trial *tells* when it ends.

What a trial tells (minimised; the cell's batch size is fixed, so steps are tokens):

==============  =========================================================================
``reached``     COMPLETE, value = steps to target (interpolated)
``censored``    COMPLETE, value = the trial's budget in steps (a lower bound on S; user attr
                ``censored=True``), so the sampler learns that this learning rate is slow
``finished``    COMPLETE, value = final held-out loss (reference cells: no target yet, the best
                final loss sets it)
``pruned``      PRUNED (stopped above the target well after the cell's best crossing)
``diverged``    FAIL (the learning rate is too high; the trial is kept in MLflow, never retried)
``stopped``     FAIL (cancelled)
``failed``      FAIL
==============  =========================================================================

The sampler is TPE with a seed derived from the cell and the trial number, so a proposal does not
depend on which process asked for it.

A proposal is two writes (the Optuna trial, then its ``lr``) made before the CBS trial exists. A
kill or a storage error between them, or before the CBS trial is made, leaves an *orphan*: a
RUNNING Optuna trial no CBS trial knows. The next ask reuses it (its ``lr``, or the one the sampler
proposes for its number when the ``lr`` was never written) instead of failing it, so the trial
numbers and the sampler's seeds, and so the proposals, are those of an undisturbed run.
"""

from __future__ import annotations

import os
import threading
import zlib
from pathlib import Path

import optuna
from optuna.trial import TrialState

optuna.logging.set_verbosity(optuna.logging.WARNING)

_STORAGES: dict[tuple[int, str], optuna.storages.RDBStorage] = {}
_LOCK = threading.Lock()


def storage(url: str) -> optuna.storages.RDBStorage:
    """One RDB storage per (process, URL)."""
    key = (os.getpid(), url)
    with _LOCK:
        found = _STORAGES.get(key)
        if found is None:
            kwargs = {}
            if url.startswith("sqlite:///"):
                Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
                kwargs = {"connect_args": {"timeout": 30}}
            from workers.infra.schema_lock import schema_lock

            with schema_lock(url, "optuna"):
                found = _STORAGES[key] = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        return found


def cell_study_name(study: str, cell_id: str) -> str:
    return f"{study}/{cell_id}"


def _seed(name: str, number: int) -> int:
    return zlib.crc32(f"{name}#{number}".encode()) & 0x7FFFFFFF


class CellSearch:
    """Ask and tell the Optuna studies of one CBS study."""

    def __init__(self, storage_url: str, study: str):
        self.storage = storage(storage_url)
        self.study = study

    def _study(self, cell_id: str, *, seed: int = 0, n_startup: int = 2) -> optuna.Study:
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup, constant_liar=True)
        return optuna.create_study(storage=self.storage, study_name=cell_study_name(self.study, cell_id),
                                   direction="minimize", sampler=sampler, load_if_exists=True)

    def ask(self, cell_id: str, count: int, *, lr_min: float, lr_max: float, n_startup: int,
            known_numbers: set[int] | None = None) -> list[tuple[int, float]]:
        """``count`` trials to start: ``[(number, lr)]``, each proposed with a seed of its own number.
        Given ``known_numbers`` (the numbers the cell's CBS trials carry), the orphans come first
        (RUNNING trials not among them; module docstring), then new ones."""
        name = cell_study_name(self.study, cell_id)
        out = []
        orphans = [] if known_numbers is None else self._orphans(cell_id, known_numbers)
        for orphan in orphans[:count]:
            lr = orphan.params.get("lr")
            if lr is None:  # cut between the two writes: what the sampler proposes for this number
                study = self._study(cell_id, seed=_seed(name, orphan.number), n_startup=n_startup)
                lr = optuna.Trial(study, orphan._trial_id).suggest_float("lr", lr_min, lr_max, log=True)
            out.append((orphan.number, lr))
        for _ in range(count - len(out)):
            number = len(self._study(cell_id).get_trials(deepcopy=False))
            study = self._study(cell_id, seed=_seed(name, number), n_startup=n_startup)
            trial = study.ask()
            lr = trial.suggest_float("lr", lr_min, lr_max, log=True)
            out.append((trial.number, lr))
        return out

    def _orphans(self, cell_id: str, known_numbers) -> list:
        """RUNNING Optuna trials of the cell that no CBS trial knows, by number (a proposal cut short)."""
        return [t for t in self.trials(cell_id) if t.state == TrialState.RUNNING and t.number not in known_numbers]

    def tell(self, cell_id: str, number: int, outcome: str, *, steps_to_target: float | None = None,
             budget_steps: int | None = None, final_eval_loss: float | None = None) -> None:
        """Tell the cell's study how trial ``number`` ended (module docstring)."""
        study = self._study(cell_id)
        if outcome == "reached" and steps_to_target is not None:
            study.tell(number, steps_to_target, skip_if_finished=True)
        elif outcome == "censored" and budget_steps is not None:
            self.storage.set_trial_user_attr(self._trial_id(study, number), "censored", True)
            study.tell(number, float(budget_steps), skip_if_finished=True)
        elif outcome == "finished" and final_eval_loss is not None:
            study.tell(number, final_eval_loss, skip_if_finished=True)
        elif outcome == "pruned":
            study.tell(number, state=TrialState.PRUNED, skip_if_finished=True)
        else:
            study.tell(number, state=TrialState.FAIL, skip_if_finished=True)

    @staticmethod
    def _trial_id(study: optuna.Study, number: int) -> int:
        return study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)

    def trials(self, cell_id: str) -> list:
        try:
            study = optuna.load_study(storage=self.storage, study_name=cell_study_name(self.study, cell_id))
        except KeyError:
            return []
        return study.get_trials(deepcopy=False)


def tell_outcome(s, study: str, tags: dict, outcome: str, result) -> None:
    """Tell the trial's Optuna study how it ended (Optuna trials only: a grid trial has no
    ``search_number`` tag). ``s``: the :class:`~workers.infra.settings.WorkerSettings`; ``result``: its
    :class:`~cbscore.train.result.TrialResult`, or ``None``."""
    if not tags.get("search_number"):
        return
    CellSearch(s.optuna_storage, study).tell(
        tags["cell"], int(tags["search_number"]), outcome,
        steps_to_target=getattr(result, "steps_to_target", None),
        budget_steps=getattr(result, "total_steps", None),
        final_eval_loss=getattr(result, "final_eval_loss", None))

"""Every check that can refuse a spec at launch, before anything is written anywhere: the sanity
limits, the data location, every cell's trainer config, and whether an already prepared token
store holds the largest trial's tokens in one pass."""

from __future__ import annotations

from cbscore.errors import ConfigError
from cbscore.study import StudySpec, estimate
from cbscore.study.ceilings import check_ceilings
from workers.studies.kinds import worker_kind


def check_spec(spec: StudySpec, *, force: bool = False) -> None:
    """Every check that can refuse a spec, before anything is written anywhere."""
    if not isinstance(spec, StudySpec):
        raise ConfigError("spec", type(spec).__name__, "must be a StudySpec")
    if not force:  # the lab's ceilings first, by arithmetic: nothing is built per cell or trial before
        check_ceilings(spec)
    est = estimate(spec)
    if est.over_limit and not force:
        field_name = "max_trials" if "max_trials" in est.over_limit else "max_total_tokens"
        raise ConfigError(field_name, getattr(spec, field_name),
                          f"the study is too large to be sane ({est.over_limit}); raise the limit or use --force")
    # A source outside the data roots, or a store folder that preparing could destroy, is refused
    # here, before anything is read or written (the worker checks again: cbscore.data.roots).
    from cbscore.data import DataConfig
    from cbscore.data.store import check_data_location

    check_data_location(DataConfig.from_dict(dict(spec.data)))
    # every trial's TrainConfig built once: a batch size the budget cannot hold, a bad data setting,
    # ... fail here with the trainer's own message, not in a worker hours later
    _check_store_holds(spec, *worker_kind(spec).largest_trial(spec))


def _check_store_holds(spec: StudySpec, tokens: int, setting_id: str, batch_size: int) -> None:
    """Where the spec's token store is already prepared (a second study on the same data, the
    default store of ``cbs up``), refuse a spec whose largest trial would read more training
    tokens than one pass holds: otherwise that trial fails in a worker after the others ran. A
    store not yet prepared is built by the first trial, which then says the same."""
    from cbscore.data import DataConfig
    from cbscore.data.store import open_store
    from cbscore.errors import DataError

    if spec.allow_repeat or tokens == 0:
        return
    data = DataConfig.from_dict(dict(spec.data))
    try:
        store = open_store(data)
    except DataError:  # not prepared (or with other settings): the first trial prepares it
        return
    held = store.train_stream(spec.context_tokens, seed=0).n_tokens  # what the trainer's check counts
    if tokens > held:
        field, value = ("data.max_documents", data.max_documents) if data.max_documents else ("data.source", data.source)
        raise ConfigError(field, value,
                          f"the token store at {store.path} holds {held:,} training tokens, too few for setting "
                          f"{setting_id} at batch size {batch_size}, whose budget reads {tokens:,} in one pass "
                          "(a window is never repeated unless allow_repeat: true); use more documents, a larger "
                          "corpus or a smaller D")

"""The parts of a study spec (:mod:`cbscore.study.spec`): its learning-rate search, its settings
``(model, D)`` as written and as resolved, and the checks they share, each raising
:class:`~cbscore.errors.ConfigError` naming the field and the value."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cbscore.config import Config, Range, boolean, checked, one_of
from cbscore.errors import ConfigError
from cbscore.study.bounds import FINITE, MAX_BATCH, MAX_TOKENS

SEARCH_KINDS = ("grid", "chained", "optuna")
#: Search kinds whose trials each run one named learning rate of the cell (the planner starts them;
#: Optuna's are asked for).
RATE_KINDS = ("grid", "chained")
#: What a chained search's reference cell runs (:attr:`SearchSpec.reference_rates`).
REFERENCE_RATES = ("grid", "bracket")
#: What a settled chained cell hands on to centre its neighbour (:attr:`SearchSpec.chain_centre`).
CHAIN_CENTRES = ("best", "vertex")
#: Orders a grid cell may start its rates in (:attr:`SearchSpec.order`).
SEARCH_ORDERS = ("predicted", "grid")

#: The paper's learning-rate grid (Zhang et al. 2025, §3.1).
PAPER_LRS = (1e-3, 3.16e-3, 6.32e-3, 1e-2, 3.16e-2)


def _positive_int(field_name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(field_name, value, "must be a positive integer")
    return value


def _positive_float(field_name: str, value: Any) -> float:
    # A chained comparison, not math.isfinite: an int past a float's range (10**400) overflows that.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= sys.float_info.max:
        raise ConfigError(field_name, value, "must be a positive finite number")
    return float(value)


def a_list(field_name: str, value: Any) -> None:
    """Refuse a scalar or a string where a list belongs (``lrs: 0.001``), naming the field."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise ConfigError(field_name, value, "must be a list")


def _each_positive_float(field_name: str, values: Any) -> None:
    a_list(field_name, values)
    for value in values:
        _positive_float(field_name, value)


def _integer_in(low: int, high: int) -> Callable[[str, Any], None]:
    def check(field_name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(field_name, value, f"must be an integer in [{low}, {high}]")
    return check


def _number_in(low: float, high: float) -> Callable[[str, Any], None]:
    def check(field_name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ConfigError(field_name, value, f"must be a number in [{low:g}, {high:g}]")
    return check


def _chain_exponent(field_name: str, value: Any) -> None:
    _positive_float(field_name, value)
    if not value <= 2:
        raise ConfigError(field_name, value, "must be a number in (0, 2]")


def _batch_floor(field_name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(field_name, value, "must be a positive integer or null")


def _each_batch_size(field_name: str, values: Any) -> None:
    a_list(field_name, values)
    for value in values:
        _positive_int(field_name, value)
    if len(set(values)) != len(values):
        raise ConfigError(field_name, list(values), "must not repeat a batch size")


def _narrow_rates(field_name: str, value: Any) -> None:
    if isinstance(value, bool) or value not in (1, 2, 3):
        raise ConfigError(field_name, value, "must be 1, 2 or 3")


def format_tokens(tokens: float) -> str:
    """Short human form of a token count: 2000000 -> '2M', 1741000000 -> '1.741B'."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if tokens >= scale:
            return f"{tokens / scale:.4g}{unit}"
    return f"{int(tokens)}"


@dataclass(frozen=True, kw_only=True)
class SearchSpec(Config):
    """How the hyper-parameters of each cell ``(setting, batch size)`` are searched."""

    _block = "search"

    kind: str = checked(one_of(SEARCH_KINDS), "grid")
    """``grid`` (every learning rate of ``lrs`` in every cell), ``chained`` (the reference cell runs
    ``lrs``; every other cell three rates centred on its neighbour's best, :mod:`cbscore.study.chained`)
    or ``optuna`` (a sampler proposes ``n_trials``)."""
    lrs: tuple[float, ...] = checked(_each_positive_float, PAPER_LRS, range=Range(0, 10, lo_open=True))
    """Peak learning rates of the grid (``kind='grid'``); with ``kind='chained'`` the reference
    cell's: with ``reference_rates: bracket`` (the default) their geometric middle is the centre of
    its three-rate bracket, with ``grid`` all of them; the paper's grid by default."""
    n_trials: int = checked(_positive_int, 4, range=Range(1, 10_000, integer=True))
    """Trials per cell proposed by Optuna (``kind='optuna'``)."""
    lr_min: float = checked(_positive_float, 1e-4, range=Range(0, 10, lo_open=True))
    """Lower bound of the Optuna learning-rate search (log-uniform)."""
    lr_max: float = checked(_positive_float, 1e-1, range=Range(0, 10, lo_open=True))
    """Upper bound of the Optuna learning-rate search (log-uniform)."""
    parallel_per_cell: int = checked(_positive_int, 2, range=Range(1, 1024, integer=True))
    """Optuna trials of one cell running at once (the sampler learns from finished ones)."""
    lr_extensions: int = checked(_integer_in(0, 8), 2, range=Range(0, 8, integer=True))
    """Grid search: rates a cell may add past each edge of ``lrs`` when its best rate sits at that
    edge (the next rate continues the grid's outermost ratio); 0 keeps the grid as given. Cells
    still at an edge are named in the fit's notes (DESIGN.md §1)."""
    chain_exponent: float = checked(_chain_exponent, 0.5, range=Range(0, 2, lo_open=True))
    """Chained search: a cell's centre rate is its neighbour's best rate (the neighbour towards
    B_ref) times ``(B/B_neighbour)^chain_exponent``; 0.5 is Adam's square-root rule (Malladi et al.
    2022, arXiv 2205.10287)."""
    bracket_ratio: float = checked(_number_in(1.1, 10), 2.0, range=Range(1.1, 10))
    """Chained search: a cell runs its centre rate ``c`` and ``c/ratio``, ``c·ratio``; an extension
    continues by the same ratio."""
    extension_gain: float = checked(_number_in(0, 1), 0.1, range=Range(0, 1))
    """Chained search: a cell adds the next rate past an edge only when that edge's steps to target
    (mean of ln S over seeds) beat its inner neighbour's by more than this fraction. With the lab's
    learning-rate curvature (k = 0.198: a rate a factor 2 off needs about 1.1× the steps) an optimum
    at the centre leaves both edges about 10% behind."""
    max_extensions: int = checked(_integer_in(0, 8), 2, range=Range(0, 8, integer=True))
    """Chained search: rates a cell may add past its edges, both sides together."""
    reference_rates: str = checked(one_of(REFERENCE_RATES), "bracket")
    """Chained search: what the reference cell runs. ``bracket`` (the default): three rates
    ``c/bracket_ratio, c, c·bracket_ratio`` around the geometric middle ``c`` of ``lrs``; ``grid``:
    every rate of ``lrs``. Either is extended past an edge where a seed's best rate sits there
    (``lr_extensions``). ``bracket`` costs less for the same precision in simulation
    (docs/results/cheaper-search/chained/)."""
    bracket_min_batch_size: int | None = checked(_batch_floor, None, range=FINITE)
    """Chained search: cells below this batch size (sequences), the reference cell excepted, start
    with ``narrow_rates`` rates instead of the three-rate bracket, where an error of the rate law
    costs little; ``None`` (the default): every cell is bracketed (what each choice costs and
    misses in simulation: docs/results/cheaper-search/chained/)."""
    narrow_rates: int = checked(_narrow_rates, 3, range=FINITE)  # its check: 1, 2 or 3
    """Chained search: rates a cell below ``bracket_min_batch_size`` starts with: 2 (``c/√ratio`` and
    ``c·√ratio``, read through the curvature the setting's bracketed cells share), 1 (the centre
    alone) or 3 (the bracket: no cell is narrow)."""
    bracket_top_cells: int | None = checked(_batch_floor, None, range=Range(1, 1_000, integer=True))
    """Chained search: the relative form of ``bracket_min_batch_size``, for a design that does not
    depend on one grid: the ``N`` largest cells of ``batch_sizes`` keep the three-rate bracket
    (where ``η*(B)`` can turn) and every cell below them, the reference cell excepted, starts with
    ``narrow_rates`` rates. ``2`` on the paper presets' nine cells is ``bracket_min_batch_size:
    8192``. Give one of the two, or neither (``None``, the default: every cell is bracketed)."""
    chain_centre: str = checked(one_of(CHAIN_CENTRES), "best")
    """Chained search: what a settled cell hands on to centre the next one.
    ``best`` (the default): the geometric mean over seeds of each seed's best discrete rate;
    ``vertex``: the continuous optimum, the vertex of the parabola in ``ln η`` the estimator fits
    across the cell's rates (curvature shared along the chain; the reference cell's from its final
    losses), :mod:`cbscore.study.chained`. With ``local_exponent`` it follows an optimal rate that
    falls past a peak (docs/results/cheaper-search/chained/ has what it costs)."""
    local_exponent: bool = checked(boolean, False)
    """Chained search: ``true`` centres a cell with the slope of ``ln η_opt``
    against ``ln B`` between the two cells before it in the chain (clamped to [-0.5, 1]) instead of
    ``chain_exponent``, once both handed on an optimum; ``false`` (the default): ``chain_exponent``
    everywhere. Meant with ``chain_centre: vertex`` (on best discrete rates its slope is 0 or ±1)."""
    replicate_batch_sizes: tuple[int, ...] = checked(_each_batch_size, (), range=Range(1, MAX_BATCH, integer=True))
    """Chained search: cells (batch sizes, sequences; never ``b_ref``, whose runs set the target)
    that, once settled, run ``replicates`` more trials at their best rate, each with a new training
    seed (after the spec's ``seeds``), to its own crossing. A new seed brings its own shift of
    ``ln S`` (DESIGN.md §1, "Intervals"), so the estimator reads it through the two-way fit of
    ``ln S`` on batch size and seed (:func:`cbscore.analysis.measure_points`): a replicate informs only
    the contrasts between the cells its seed ran in, and a single listed cell learns nothing. Empty
    (the default): no replicates (what they cost and gain in simulation:
    docs/results/cheaper-search/chained/)."""
    replicate_ends: bool = checked(boolean, False)
    """Chained search: the relative form of ``replicate_batch_sizes``: ``true`` replicates the
    smallest and the largest cell of ``batch_sizes`` other than ``b_ref``, the pair that spans the
    whole curve (on the paper presets ``[64, 16384]``; what it costs and gains in simulation:
    docs/results/cheaper-search/chained/, "Replicates"). Give one of the two, or neither."""
    replicates: int = checked(_integer_in(1, 4), 1, range=Range(1, 4, integer=True))
    """Chained search: replicate trials (new training seeds) each cell of ``replicate_batch_sizes``
    runs."""
    order: str = checked(one_of(SEARCH_ORDERS), "predicted")
    """Grid search: the order a cell starts its rates in. ``predicted`` (the default): nearest the
    rate predicted from the setting's measured cells first (``cbscore.study.lr_predict``), so the
    cell's best crosses early and the far rates, started later, stop at the prune margin past it
    instead of running to their own crossing; every rate still runs and the fit reads the same
    crossings (what it saves: docs/results/cheaper-search/).
    ``grid``: ascending, as the spec lists them. ``experimental.predict`` and
    ``experimental.prune_at_equal_tokens`` always order by the prediction."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kind in RATE_KINDS and not self.lrs:
            raise ConfigError("search.lrs", list(self.lrs), "must list at least one learning rate")
        if len(set(self.lrs)) != len(self.lrs):
            raise ConfigError("search.lrs", list(self.lrs), "must not repeat a learning rate")
        if self.lr_min >= self.lr_max:
            raise ConfigError("search.lr_max", self.lr_max, f"must be above search.lr_min={self.lr_min}")

    @property
    def runs_rates(self) -> bool:
        """Whether each trial runs one learning rate the planner names (``grid``, ``chained``)."""
        return self.kind in RATE_KINDS

    def trials_per_cell(self, reference: bool = False) -> int:
        """Learning rates (or Optuna trials) of one cell as planned, before any extension; a chained
        search runs ``lrs`` in the reference cell and three rates elsewhere."""
        if self.kind == "chained" and (not reference or self.reference_rates == "bracket"):
            return 3
        return len(self.lrs) if self.kind in RATE_KINDS else self.n_trials


@dataclass(frozen=True, kw_only=True)
class ExperimentalSpec(Config):
    """Rules that failed the simulator's criteria for a default (docs/results/cheaper-search/): kept for the simulator
    and for studies that ran with them, off by default, absent from the Launch page and the presets
    (a spec's ``experimental:`` mapping)."""

    _block = "experimental"

    predict: bool = checked(boolean, False)
    """Grid search: run each cell's predicted best rate first (``cbscore.study.lr_predict``: the
    best rates of the setting's measured cells fitted in log B, Adam's √B rule before two are
    known), its neighbours next, and add no rate once the optimum is bracketed and the fit's window
    around it is run; ``search.lrs`` (with ``search.lr_extensions``) stays the set of allowed rates.
    Experimental: 3.6-4.4× the oracle at σ = 0, dearer than ``search.kind: chained`` for the same B*
    (docs/results/cheaper-search/chained/)."""
    lr_prior: float | None = checked(_positive_float, None, range=Range(0, 10, lo_open=True))
    """Grid search: the best rate predicted for a cell before any cell of its setting (or any
    study's reference cell) is measured; ``None`` takes the grid's geometric middle. Orders the
    first cell's rates (``search.order: predicted``) and picks ``predict``'s first three.
    Experimental: it saves nothing (docs/results/cheaper-search/prior/); the paper presets
    once set 0.00316, the single rate of the paper's released sweep configs (Zhang et al. 2025,
    github.com/hlzhang109/critical-batch-size, ``configs/critical-bs/``)."""
    prune_at_equal_tokens: bool = checked(boolean, False)
    """Stop a trial as ``pruned`` before the cell's best has crossed when, at the same step, its
    held-out loss trails the cell's leader by more than ``equal_token_margin`` nats; its steps to
    target are projected (``cbscore.study.equal_tokens``). Experimental: B* off the truth by up to
    1.1% at zero noise, failing criterion 1 (docs/results/cheaper-search/chained/)."""


#: Fields that moved into ``experimental:``, by the place a spec from before gave them.
MOVED_TO_EXPERIMENTAL = {"search.predict": "predict", "search.lr_prior": "lr_prior",
                         "prune_at_equal_tokens": "prune_at_equal_tokens"}


def move_experimental(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A spec's fields (a mapping, or ``replace``'s changes) with the rules given at their old place
    (``search.predict``, ``search.lr_prior``, top-level ``prune_at_equal_tokens``) moved into
    ``experimental``, so a spec written before issue 40 loads and plans as it did; each move warns
    (a ``FutureWarning``, shown by default) naming the field and its new place."""
    import warnings

    out = dict(fields)
    moved: dict[str, Any] = {}
    search = out.get("search")
    if isinstance(search, Mapping):
        search = dict(search)
        for key in ("predict", "lr_prior"):
            if key in search:
                moved[f"search.{key}"] = search.pop(key)
        out["search"] = search
    if "prune_at_equal_tokens" in out:
        moved["prune_at_equal_tokens"] = out.pop("prune_at_equal_tokens")
    if not moved:
        return out
    block = out.get("experimental")
    if isinstance(block, ExperimentalSpec):
        block = dataclasses.asdict(block)
    elif block is None:
        block = {}
    elif not isinstance(block, Mapping):
        raise ConfigError("experimental", block, "must be a mapping of fields")
    block = dict(block)
    for old, value in moved.items():
        new = MOVED_TO_EXPERIMENTAL[old]
        if new in block and block[new] != value:
            raise ConfigError(old, value, f"moved to experimental.{new}, which the spec also sets to {block[new]!r}; "
                                          "give it once, there")
        block[new] = value
        warnings.warn(f"{old} moved to experimental.{new} (issue 40: a rule that failed the criteria, "
                      "docs/results/cheaper-search/); read from its old place this time", FutureWarning, stacklevel=3)
    out["experimental"] = block
    return out


@dataclass(frozen=True, kw_only=True)
class SettingSpec(Config):
    """One ``(model, D)`` of a ``custom`` study (checked by the study: only a ``custom`` study reads
    them, and its messages name the entry, ``settings[0].model``)."""

    model: str
    """Model preset name (``cbs models`` lists them)."""
    tokens: int = checked(None, range=Range(1, MAX_TOKENS, integer=True))
    """Training tokens D of the setting (the reference budget)."""


@dataclass(frozen=True, kw_only=True)
class Setting:
    """A resolved setting ``(N, D)`` of a study, with a stable id."""

    setting_id: str
    """Stable id, e.g. ``tiny-0.4M_D2M``; unique within the study."""
    model: str
    """Model preset name."""
    n_params: int
    """Non-embedding parameters N (``12·L·d²``)."""
    tokens: int
    """Training tokens D: the reference runs' budget."""
    flops_per_token: float
    """Training FLOPs per token of the preset at the study's context (PaLM appendix B)."""


def _settings_given(value: Any) -> Any:
    """``StudySpec.settings`` as given on the wire: each ``{model, tokens}`` mapping becomes a
    :class:`SettingSpec`; any other entry stays for :func:`_each_setting` to name with its index
    (a string or a mapping is read entry by entry, as a list of its characters or keys)."""
    if not hasattr(value, "__iter__"):
        return value  # refused by iterating it in the check
    if isinstance(value, tuple) and all(isinstance(s, SettingSpec) for s in value):
        return value
    return tuple(SettingSpec(model=s["model"], tokens=s["tokens"])
                 if isinstance(s, Mapping) and set(s) == {"model", "tokens"} else s for s in value)


def _each_setting(field_name: str, value: Any) -> None:
    a_list(field_name, value)
    for index, setting in enumerate(value):
        if not isinstance(setting, SettingSpec):
            raise ConfigError(f"{field_name}[{index}]", setting, "must be a mapping with exactly the keys model and tokens")


def _search_given(value: Any) -> Any:
    """``StudySpec.search`` as given: a mapping read by :meth:`SearchSpec.from_dict`, refusing a rule
    given at the place it moved from (``StudySpec.from_dict`` moves those first, with a warning;
    a spec built in code gets told where it went)."""
    if isinstance(value, SearchSpec):
        return value
    if isinstance(value, Mapping):
        for key in sorted(value):
            if f"search.{key}" in MOVED_TO_EXPERIMENTAL:
                raise ConfigError(f"search.{key}", value[key], f"moved to experimental.{key} (issue 40)")
    return SearchSpec.from_dict(value)


def _experimental_given(value: Any) -> Any:
    """``StudySpec.experimental`` as given: a mapping read by :meth:`ExperimentalSpec.from_dict`."""
    return value if isinstance(value, ExperimentalSpec) else ExperimentalSpec.from_dict(value)

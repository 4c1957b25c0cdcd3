"""Figure 3: rolling-average reward over the horizon (Section 6.3).

Six policies (all but MoE and Random), tight and loose levels, both environments, 20 seeds.
The runs are the cells of the Figure 2 sweep (same specification, same numbers), so after
``reproduce fig2`` (or within ``reproduce all``) nothing is simulated again: the cells are read
from the cache. The paper states a window of 500 in the text and 5,000 in the caption; the
window is a setting (default 500) and both are easy to draw.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from msroute.errors import InvalidValueError
from msroute.experiments.backends import Backend
from msroute.experiments.fig2 import Fig2Config, run_sweep
from msroute.experiments.output import Progress, Summary, publish
from msroute.metrics import rolling_mean

__all__ = ["Fig3Config", "run_fig3"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fig3Config(Fig2Config):
    """Settings of Figure 3: those of Figure 2 plus the rolling window and what to draw.

    Attributes
    ----------
    window : int
        Rolling-average window in rounds (500 in the text, 5,000 in the caption).
    show_levels, show_policies : tuple of str
        Levels and policies drawn (tight/loose; all but MoE and Random).
    every : int
        Keep one point of the rolling curve every ``every`` rounds in the CSV and plot.
    """

    window: int = 500
    show_levels: tuple[str, ...] = ("tight", "loose")
    show_policies: tuple[str, ...] = ("greedy", "cucb", "cbwk", "ts", "ts-bwk", "omd")
    every: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.window <= self.horizon:
            raise InvalidValueError(
                f"window == {self.window}, must be in [1, horizon = {self.horizon}]"
            )
        if self.every < 1:
            raise InvalidValueError(f"every == {self.every}, must be >= 1")
        missing = [lv for lv in self.show_levels if lv not in self.levels]
        if missing:
            raise InvalidValueError(f"show_levels {missing} are not among levels {self.levels}")


def run_fig3(
    cfg: Fig3Config,
    out: Path,
    *,
    jobs: int = 1,
    backend: Backend | None = None,
    progress: Progress | None = None,
    plot: bool = True,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """Run Figure 3 and write ``fig3.csv``, ``fig3.json``, ``fig3.png`` and ``fig3.svg``.

    The CSV has one row per environment, level, policy and kept round: the rolling mean
    (``mean``) and its standard deviation over seeds (``std``).
    """
    tic = time.perf_counter()
    progress = progress or Progress(enabled=not quiet)
    sweep_cfg = Fig2Config(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(Fig2Config)})
    labelled, results = run_sweep(
        sweep_cfg,
        out,
        jobs,
        progress,
        labels=cfg.show_policies,
        backend=backend,
        rewards=True,
        plot=plot,
    )
    n_seeds = len(cfg.seed_list)
    rows: list[dict[str, Any]] = []
    summary = Summary(
        f"Figure 3: rolling reward (window {cfg.window}) at the last round",
        ("env", "level", "policy", "rolling reward", "std"),
    )
    for (label, spec), res in zip(labelled, results, strict=True):
        if label not in cfg.show_policies:
            continue
        rewards = res["rewards"].astype(np.float64)
        for li, level in enumerate(spec.levels):
            if level not in cfg.show_levels:
                continue
            block = rewards[:, li * n_seeds : (li + 1) * n_seeds]
            roll = rolling_mean(block, cfg.window)  # (T - w + 1, S)
            rounds = np.arange(cfg.window, cfg.horizon + 1)
            keep = np.unique(np.r_[np.arange(0, roll.shape[0], cfg.every), roll.shape[0] - 1])
            mean, std = roll.mean(axis=1), roll.std(axis=1)
            rows.extend(
                {
                    "env": spec.env,
                    "level": level,
                    "policy": label,
                    "round": int(rounds[i]),
                    "mean": float(mean[i]),
                    "std": float(std[i]),
                    "n_seeds": n_seeds,
                }
                for i in keep
            )
            summary.rows.append((spec.env, level, label, float(mean[-1]), float(std[-1])))
    publish(
        out,
        "fig3",
        rows,
        config=cfg,
        seeds=cfg.seed_list,
        started=tic,
        summary=summary,
        plot=plot,
        quiet=quiet,
        jobs=jobs,
    )
    return rows

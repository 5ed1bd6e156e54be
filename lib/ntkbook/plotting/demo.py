"""Figures of the demo experiment."""

from __future__ import annotations

import numpy as np

from ntkbook.plotting import new_figure
from ntkbook.store import Result


def plot_demo_sweep(result: Result):
    """RMS error of the Monte Carlo estimate versus sample size, log-log, with a 1/sqrt(n) line."""
    fig, ax = new_figure(width=5.2, height=3.4)
    n, err = result["sample_sizes"], result["rms_error"]
    ax.loglog(n, err, "o-", label=f"measured (slope {result['loglog_slope']:.2f})")
    ax.loglog(n, err[0] * np.sqrt(n[0] / n), "k--", lw=1, label=r"$\propto 1/\sqrt{n}$")
    ax.set_xlabel("number of samples $n$")
    ax.set_ylabel("RMS error of the estimate")
    ax.legend()
    return fig

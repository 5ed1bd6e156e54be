"""The overview picture of the introduction."""

from __future__ import annotations

import numpy as np

from ntkbook.plotting import panels
from ntkbook.store import Result


def plot_overview(gram_eigs: np.ndarray, cubed_eigs: np.ndarray, demo: Result, p: int = 29, k: int = 3):
    """Three panels: (a) the spectrum of G and of G^3, normalised by the top eigenvalue;
    (b) the 1/sqrt(n) law of Monte Carlo fluctuations (the demo experiment);
    (c) a Fourier feature cos(2πk(a+b)/p) over the (a, b) grid of modular addition.

    Args:
      gram_eigs: eigenvalues of a Gram matrix G, any order.
      cubed_eigs: eigenvalues of G^3 (computed, not cubed here).
      demo: the ``demo_sweep`` result.
    """
    fig, (ax1, ax2, ax3), _ = panels(3, row_height=2.9)
    for eigs, label in ((gram_eigs, r"$G = XX^\top$"), (cubed_eigs, r"$\tilde G = G^3$")):
        e = np.sort(np.asarray(eigs))[::-1]
        e = e[e > 0]
        ax1.semilogy(np.arange(1, e.size + 1), e / e[0], label=label)
    ax1.set_xlabel("index $i$")
    ax1.set_ylabel(r"$\lambda_i / \lambda_1$")
    ax1.set_title("(a) spectrum of $G$ and $G^3$")
    ax1.legend(loc="lower left")

    n, err = demo["sample_sizes"], demo["rms_error"]
    ax2.loglog(n, err, "o-", label="measured")
    ax2.loglog(n, err[0] * np.sqrt(n[0] / n), "k--", lw=1, label=r"$\propto 1/\sqrt{n}$")
    ax2.set_xlabel("random units $n$")
    ax2.set_ylabel("RMS fluctuation")
    ax2.set_title(r"(b) noise $\sim 1/\sqrt{n}$")
    ax2.legend()

    a = np.arange(p)
    img = np.cos(2 * np.pi * k * (a[:, None] + a[None, :]) / p)
    ax3.imshow(img, cmap="RdBu_r", origin="lower")
    ax3.set_xlabel("$b$")
    ax3.set_ylabel("$a$")
    ax3.set_title(rf"(c) $\cos(2\pi\,{k}(a+b)/{p})$")
    ax3.set_xticks([0, p // 2, p - 1])
    ax3.set_yticks([0, p // 2, p - 1])
    ax3.grid(False)
    return fig

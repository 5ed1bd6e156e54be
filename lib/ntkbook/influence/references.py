r"""What a flip rate is read against: the random-sign null below, the independence ceiling above.

- :func:`random_sign_null`: the training set moved by ``+-eps`` per pixel with independent fair
  signs (FGSM's norm, no adversary), drawn with NumPy from a seeded generator, so the draws are
  the same whatever JAX's global settings (``jax_enable_x64`` changes the bits of
  :func:`ntkbook.influence.attacks.random_sign`, whose draws go through ``jax.random``).
- :func:`independence_ceiling`: the flip rate to expect if the perturbed influences' signs carried
  no information about the clean ones. Let :math:`q_s` be the fraction of *all* clean influences
  with sign :math:`s`. If the perturbed sign of point ``i`` is an independent draw from that
  distribution, point ``i`` of the top set :math:`T` flips with probability :math:`1 - q_{s_i}`, so

  .. math:: \mathbb E[\text{flip rate}] = \frac{1}{|T|}\sum_{i\in T} \bigl(1 - q_{\operatorname{sign} I_i}\bigr)
            = f_+ q_- + f_- q_+ \quad(\text{no zeros}),

  with :math:`f_\pm` the fractions of :math:`T` with either sign. For balanced signs it is 1/2; it
  is lower when the top set's signs follow the majority, higher when they go against it.
"""

from __future__ import annotations

import numpy as np

from ntkbook.errors import InputError
from ntkbook.influence import scores

__all__ = ["independence_ceiling", "random_sign_null"]


def independence_ceiling(clean, *, fraction: float = 0.1, top=None) -> float:
    """Expected flip rate over the top set when the perturbed signs are independent draws from the
    sign distribution of ``clean`` (``(n,)``, every training point's influence; module docstring).

    ``top`` (indices) overrides the set; by default it is
    :func:`ntkbook.influence.scores.top_indices` of ``clean`` with ``fraction``, the set
    :func:`ntkbook.influence.scores.flip_rate` uses. A drawn sign of 0 counts as a flip, as in
    :func:`~ntkbook.influence.scores.flip_rate`."""
    c = np.asarray(clean, dtype=np.float64)
    if c.ndim != 1 or c.size == 0:
        raise InputError(f"clean influences must be a non-empty vector, got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise InputError("clean influences contain NaN or infinite values")
    idx = scores.top_indices(c, fraction) if top is None else np.asarray(top, dtype=int)
    if idx.size == 0:
        raise InputError("the top set is empty")
    signs = np.sign(c)
    share = {s: float(np.mean(signs == s)) for s in (-1.0, 0.0, 1.0)}
    return float(np.mean([1.0 - share[s] for s in signs[idx]]))


def random_sign_null(x, eps: float, rng: np.random.Generator, *, mask=None) -> np.ndarray:
    """``clip(x + eps * s, 0, 1)`` ``(N, D)`` float64, with independent fair signs ``s = +-1`` drawn
    from ``rng`` on the rows ``mask`` (boolean ``(N,)``; default every row), the others unchanged.

    Signs are drawn for every row, masked or not, so a row's signs do not depend on the mask. Before
    clipping the step has exactly the L-inf and L2 norm of an FGSM step."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise InputError(f"x must be a batch of shape (N, D), got shape {x.shape}")
    if not eps >= 0:
        raise InputError(f"eps must be >= 0, got {eps}")
    if np.any(x < 0) or np.any(x > 1):
        raise InputError("x must lie in the box [0, 1] (pixels scaled to [0, 1])")
    mask = np.ones(x.shape[0], bool) if mask is None else np.asarray(mask, bool)
    if mask.shape != (x.shape[0],):
        raise InputError(f"mask must have shape ({x.shape[0]},), got {mask.shape}")
    s = 2.0 * rng.integers(0, 2, size=x.shape).astype(np.float64) - 1.0
    return np.clip(x + eps * s * mask[:, None], 0.0, 1.0)

r"""Feature functions and the tools that compare them with kernel eigenvectors.

Fourier features on the grid of pairs
-------------------------------------
The inputs of the modular-addition task are the :math:`N = p^2` pairs :math:`(a, b)`, in a-major
order (row ``n = a * p + b``, as :func:`grid` and :mod:`ntkbook.models.modular`).  A *feature set*
is a family of functions on the grid, evaluated on the N points and stored as the columns of an
``(N, d)`` matrix.  :func:`fourier_features` gives, for an integer combination
:math:`m = \alpha a + \beta b` (``kind`` ``"a"``, ``"b"``, ``"sum"`` = a+b, ``"diff"`` = a−b,
``"2a"``, ``"2b"``, or a pair ``(α, β)``), the :math:`2\lfloor p/2\rfloor` functions

.. math:: \cos(2\pi k m/p),\ \sin(2\pi k m/p), \qquad k = 1, \dots, \lfloor p/2 \rfloor .

For odd ``p`` they are linearly independent; for even ``p`` the last sine vanishes and
:func:`orthonormal_basis` drops it.

Subspace overlap
----------------
With :math:`Q` an orthonormal basis of a span of eigenvectors (k columns) and :math:`F` one of a
feature span (d columns), the overlap is :math:`\|Q^\top F\|_F^2 = \operatorname{tr}(P_Q P_F)`, the
sum of the squared cosines of the principal angles between the two subspaces: it lies in
:math:`[0, \min(k, d)]`, does not depend on the bases chosen, equals :math:`d` when the feature
span lies inside the eigenvector span, and has expectation :math:`kd/N` for a random k-dimensional
subspace (:func:`random_subspace_overlap`, the chance level).

Cliffs
------
:func:`find_cliffs` locates the "cliffs" of a spectrum: blocks of large eigenvalues that end in a
sharp drop, found as the largest drops of :math:`\log\lambda`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import scipy.linalg

from ntkbook.errors import InputError
from ntkbook.ntk.gram import psd_spectrum
from ntkbook.stats import mean_spread

__all__ = [
    "FEATURE_KINDS",
    "grid",
    "fourier_features",
    "fourier_basis",
    "orthonormal_basis",
    "subspace_overlap",
    "overlap_fraction",
    "random_subspace_overlap",
    "RandomOverlap",
    "find_cliffs",
    "Cliffs",
    "CONTENT_KINDS",
    "axis_features",
    "key_frequency_bases",
    "fourier_content",
    "additive_basis",
    "additive_dimension",
    "additive_chance",
    "KeyFrequencies",
    "embedding_fourier_power",
    "key_frequencies",
]

#: named integer combinations (α, β) of (a, b)
FEATURE_KINDS: dict[str, tuple[int, int]] = {
    "a": (1, 0),
    "b": (0, 1),
    "sum": (1, 1),
    "diff": (1, -1),
    "2a": (2, 0),
    "2b": (0, 2),
}


def grid(p: int) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``: the coordinates of the ``p**2`` pairs in a-major order (row ``a * p + b``)."""
    a, b = np.divmod(np.arange(p * p), p)
    return a, b


def _combination(kind) -> tuple[int, int]:
    if isinstance(kind, str):
        if kind not in FEATURE_KINDS:
            raise InputError(f"unknown feature kind {kind!r}; choose one of {sorted(FEATURE_KINDS)} "
                             f"or pass a pair (alpha, beta) of integers")
        return FEATURE_KINDS[kind]
    alpha, beta = kind
    return int(alpha), int(beta)


def fourier_features(p: int, kind="a", frequencies: Iterable[int] | None = None) -> np.ndarray:
    r"""Raw Fourier features ``(p², 2K)`` of :math:`m = \alpha a + \beta b` on the grid.

    Columns ``[cos(2π k_1 m/p), sin(2π k_1 m/p), cos(2π k_2 m/p), ...]`` for the frequencies
    ``k`` (default ``1, ..., ⌊p/2⌋``).  Not normalised; see :func:`fourier_basis`.
    """
    alpha, beta = _combination(kind)
    ks = np.arange(1, p // 2 + 1) if frequencies is None else np.asarray(list(frequencies), int)
    if ks.size == 0:
        raise InputError("no frequencies given")
    a, b = grid(p)
    m = (alpha * a + beta * b) % p
    phase = 2 * np.pi * np.outer(m, ks) / p  # (N, K)
    out = np.empty((p * p, 2 * ks.size))
    out[:, 0::2] = np.cos(phase)
    out[:, 1::2] = np.sin(phase)
    return out


def fourier_basis(p: int, kinds="a", frequencies: Iterable[int] | None = None) -> np.ndarray:
    """Orthonormal basis ``(p², d)`` of the span of one or several Fourier feature sets.

    ``kinds`` is one kind (``"a"``, ``"sum"``, ``(α, β)``, ...) or a sequence of kinds whose spans
    are joined (``("a", "b")`` is the 4⌊p/2⌋-dimensional space of the first cliff).  The features
    are mean-centred before orthonormalisation (they already have mean zero on the full grid).
    """
    if isinstance(kinds, (str,)) or (isinstance(kinds, tuple) and len(kinds) == 2
                                     and all(isinstance(k, (int, np.integer)) for k in kinds)):
        kinds = [kinds]
    freqs = None if frequencies is None else list(frequencies)
    F = np.concatenate([fourier_features(p, k, freqs) for k in kinds], axis=1)
    return orthonormal_basis(F, center=True)


def orthonormal_basis(F, center: bool = True, rtol: float = 1e-8) -> np.ndarray:
    """Orthonormal basis ``(N, r)`` of the column span of ``F`` ``(N, d)``.

    With ``center=True`` each column first has its mean subtracted (feature functions are compared
    as centred functions, so the constant direction never counts).  The basis is the left singular
    vectors whose singular values exceed ``rtol`` times the largest, so linearly dependent or
    (after centring) vanishing columns are dropped and ``r = rank``.
    """
    F = np.asarray(F, dtype=np.float64)
    if F.ndim == 1:
        F = F[:, None]
    if F.ndim != 2:
        raise InputError(f"F must be a matrix (N, d), got shape {F.shape}")
    if center:
        F = F - F.mean(axis=0, keepdims=True)
    if F.shape[1] == 0:
        return F
    u, s, _ = scipy.linalg.svd(F, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return u[:, :0]
    return u[:, s > rtol * s[0]]


def subspace_overlap(Q, F, *, orthonormalize: bool = True) -> float:
    r"""Overlap :math:`\|Q^\top F\|_F^2` of the column spans of ``Q`` ``(N, k)`` and ``F`` ``(N, d)``.

    Both are orthonormalised first (no centring: pass centred features, e.g. from
    :func:`fourier_basis`), unless ``orthonormalize=False`` asserts they already are.  The value is
    a sum of squared cosines of principal angles, between 0 and ``min(rank Q, rank F)``.
    """
    Q = np.asarray(Q, dtype=np.float64)
    F = np.asarray(F, dtype=np.float64)
    if Q.ndim == 1:
        Q = Q[:, None]
    if F.ndim == 1:
        F = F[:, None]
    if Q.shape[0] != F.shape[0]:
        raise InputError(f"Q and F live in different spaces: {Q.shape[0]} vs {F.shape[0]} rows")
    if orthonormalize:
        Q = orthonormal_basis(Q, center=False)
        F = orthonormal_basis(F, center=False)
    return float(np.sum((Q.T @ F) ** 2))


def overlap_fraction(Q, F, *, orthonormalize: bool = True) -> float:
    """:func:`subspace_overlap` divided by the dimension of the feature span ``F`` (in [0, 1])."""
    F = np.asarray(F, dtype=np.float64)
    Fo = orthonormal_basis(F, center=False) if orthonormalize else F
    d = Fo.shape[1] if Fo.ndim == 2 else 1
    if d == 0:
        raise InputError("the feature span is empty")
    return subspace_overlap(Q, Fo, orthonormalize=orthonormalize) / d


@dataclass(frozen=True)
class RandomOverlap:
    """Chance level of the overlap of a random k-dimensional subspace with a fixed d-dimensional one.

    ``mean = k d / N`` exactly; ``std`` is the exact standard deviation for a Haar-random subspace;
    ``sampled_mean``/``sampled_std`` come from ``samples`` Monte Carlo draws (NaN when none).
    """

    n: int
    k: int
    d: int
    mean: float
    std: float
    sampled_mean: float = float("nan")
    sampled_std: float = float("nan")

    @property
    def fraction(self) -> float:
        """Chance level as a fraction of the feature dimension, ``k / N``."""
        return self.mean / self.d if self.d else float("nan")


def random_subspace_overlap(n: int, k: int, d: int, *, samples: int = 0, seed: int = 0) -> RandomOverlap:
    r"""Overlap of a uniformly random k-dimensional subspace of :math:`\mathbb R^n` with a fixed d-dim one.

    Exact moments: the overlap is :math:`\operatorname{tr}(P_Q P_F)`; for Haar-random :math:`Q` its
    mean is :math:`kd/n` and its variance
    :math:`\dfrac{2kd(n-k)(n-d)}{n^2(n-1)(n+2)}`.  With ``samples > 0`` the overlap is also
    sampled (QR of Gaussian matrices) as a check.
    """
    if not (0 <= k <= n and 0 <= d <= n and n >= 2):
        raise InputError(f"need 0 <= k, d <= n and n >= 2; got n={n}, k={k}, d={d}")
    mean = k * d / n
    var = 2.0 * k * d * (n - k) * (n - d) / (n * n * (n - 1) * (n + 2))
    sm = ss = float("nan")
    if samples > 0:
        rng = np.random.default_rng(seed)
        vals = []
        for _ in range(samples):
            q, _ = np.linalg.qr(rng.standard_normal((n, k)))
            vals.append(float(np.sum(q[:d] ** 2)))  # F = first d coordinate axes
        sm, ss = mean_spread(vals)
        if samples == 1:  # one draw has no sample spread to report
            ss = float("nan")
    return RandomOverlap(n, k, d, mean, math.sqrt(max(var, 0.0)), sm, ss)


@dataclass(frozen=True)
class Cliffs:
    """Cliffs of a spectrum sorted in decreasing order.

    ``edges[i]`` is the index of the first eigenvalue *after* cliff ``i`` (so cliff 0 is
    ``[0, edges[0])`` and cliff i is ``[edges[i-1], edges[i])``); ``sizes`` the number of
    eigenvalues in each; ``drops`` the drop ``log λ[e-1] - log λ[e]`` (natural log) at each edge;
    ``ratios = exp(drops)``.
    """

    edges: tuple[int, ...]
    sizes: tuple[int, ...]
    drops: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(float(np.exp(d)) for d in self.drops)

    def ranges(self) -> list[range]:
        starts = (0,) + self.edges[:-1]
        return [range(s, e) for s, e in zip(starts, self.edges)]


def find_cliffs(
    eigenvalues: Sequence[float],
    n: int = 2,
    *,
    min_size: int = 2,
    max_index: int | None = None,
    rel_drop: float = 10.0,
    frac_of_max: float = 0.2,
    min_drop: float = 0.0,
    rtol: float = 1e-10,
) -> Cliffs:
    r"""Up to ``n`` cliffs of a spectrum: its largest significant drops of :math:`\log\lambda`.

    Rule.

    1. Sort the eigenvalues in decreasing order; keep those above ``rtol * λ_max`` and, when
       ``max_index`` is given, only the first ``max_index`` of them (so that the tail near zero,
       where tiny eigenvalues make huge log-drops, cannot produce spurious cliffs).
    2. Every position ``e`` between ``λ[e-1]`` and ``λ[e]`` is a candidate edge with drop
       :math:`\delta_e = \log\lambda_{e-1} - \log\lambda_e`.  A candidate is *significant* when
       :math:`\delta_e \ge` ``max(min_drop, rel_drop * median(δ), frac_of_max * max(δ))``: a
       cliff is a drop at least ``rel_drop`` (default 10) times the typical spacing of the
       spectrum and at least ``frac_of_max`` (default 0.2) of the largest drop, so that a
       spectrum with one real cliff does not get a second one from fluctuations.
    3. Significant candidates are taken greedily, largest drop first, skipping any that would
       leave a block (before the first chosen edge, or between two chosen edges) of fewer than
       ``min_size`` eigenvalues, until ``n`` edges are chosen or none is left.

    ``min_size`` is how an isolated outlier is handled: with the default 2, a single mode standing
    above the rest (the constant mode of a class-mean eNTK, often orders of magnitude above the
    others) cannot form a cliff of its own.  Callers who want the constant mode out of the count
    remove it from the spectrum first (as :mod:`ntkbook.experiments.modular_mlp` does).

    Returns a :class:`Cliffs` with the chosen edges in increasing order; it holds fewer than ``n``
    edges when fewer significant drops exist (no cliff is invented).  The spectrum is checked by
    :func:`ntkbook.ntk.gram.psd_spectrum`: NaN, inf and negatives beyond round-off are refused.
    """
    if np.ndim(eigenvalues) != 1 or np.size(eigenvalues) < 2:
        raise InputError("need a 1-D spectrum with at least two eigenvalues")
    lam = psd_spectrum(eigenvalues, "eigenvalues")
    if not lam[0] > 0:
        raise InputError("the largest eigenvalue must be positive")
    if n < 1 or min_size < 1:
        raise InputError(f"n and min_size must be positive, got n={n}, min_size={min_size}")
    keep = int(np.sum(lam > rtol * lam[0]))
    if max_index is not None:
        keep = min(keep, int(max_index))
    lam = lam[:keep]
    if lam.size < 2:
        return Cliffs((), (), ())
    drops = np.log(lam[:-1]) - np.log(lam[1:])  # drops[e-1] is the drop before index e
    threshold = max(float(min_drop), float(rel_drop) * float(np.median(drops)),
                    float(frac_of_max) * float(np.max(drops)))
    chosen: list[int] = []
    for j in np.argsort(-drops, kind="stable"):
        if drops[j] < threshold or drops[j] <= 0:
            break
        e = int(j) + 1
        trial = sorted(chosen + [e])
        if np.all(np.diff([0] + trial) >= min_size):
            chosen = trial
            if len(chosen) == n:
                break
    edges = tuple(chosen)
    sizes = tuple(int(s) for s in np.diff((0,) + edges))
    return Cliffs(edges, sizes, tuple(float(drops[e - 1]) for e in edges))


# --------------------------------------------------------------------------------------------------
# Fourier features at a few key frequencies (the one-layer transformer)
# --------------------------------------------------------------------------------------------------
#: the orthogonal feature families of :func:`key_frequency_bases`, in reporting order
CONTENT_KINDS = ("const", "axis_sum", "axis_diff", "sum", "diff")


def axis_features(p: int, frequencies: Iterable[int] | None = None, sign: int = 1) -> np.ndarray:
    r"""Raw "axis" features ``(p², 2K)``: :math:`\cos\omega a + s \cos\omega b` and
    :math:`\sin\omega a + s \sin\omega b` for :math:`\omega = 2\pi k/p` and ``sign`` :math:`s = \pm1`.

    ``sign=+1`` gives Paper B's *axis sum* features, the functions of :math:`a` and of :math:`b`
    that are symmetric under :math:`a \leftrightarrow b`; ``sign=-1`` the antisymmetric *axis
    difference*.  Columns ``[cos k_1, sin k_1, cos k_2, ...]``.
    """
    if sign not in (1, -1):
        raise InputError(f"sign must be +1 or -1, got {sign}")
    freqs = None if frequencies is None else list(frequencies)
    return fourier_features(p, "a", freqs) + sign * fourier_features(p, "b", freqs)


def key_frequency_bases(p: int, frequencies: Iterable[int]) -> dict[str, np.ndarray]:
    r"""Orthonormal bases ``(p², d)`` of the five feature families at the given frequencies.

    ``const`` (d = 1), ``axis_sum`` (:math:`\cos\omega a + \cos\omega b`, ...), ``axis_diff``
    (:math:`\cos\omega a - \cos\omega b`, ...), ``sum`` (:math:`\cos\omega(a+b)`, ...) and ``diff``
    (:math:`\cos\omega(a-b)`, ...), each with d = 2K for K frequencies (p odd).  The five spaces
    are mutually orthogonal: they are spanned by distinct characters :math:`\chi_{k,l}` of
    :math:`\mathbb Z_p^2` (:math:`(0,0)`; :math:`(\pm k, 0)` and :math:`(0, \pm k)`; :math:`\pm(k,k)`;
    :math:`\pm(k,-k)`) as long as no frequency is 0 or :math:`p/2`.
    """
    freqs = [int(k) for k in frequencies]
    if not freqs:
        raise InputError("no frequencies given")
    bad = [k for k in freqs if not 1 <= k <= p // 2]
    if bad or len(set(freqs)) != len(freqs):
        raise InputError(f"frequencies must be distinct integers in 1..{p // 2}, got {freqs}")
    n = p * p
    return {
        "const": np.full((n, 1), 1.0 / math.sqrt(n)),
        "axis_sum": orthonormal_basis(axis_features(p, freqs, +1)),
        "axis_diff": orthonormal_basis(axis_features(p, freqs, -1)),
        "sum": fourier_basis(p, "sum", freqs),
        "diff": fourier_basis(p, "diff", freqs),
    }


def fourier_content(vectors, bases: dict[str, np.ndarray]) -> np.ndarray:
    r"""Share of each vector's squared norm in each feature space, and the rest.

    ``vectors`` ``(N, k)`` (columns, e.g. eigenvectors); ``bases`` name -> orthonormal ``(N, d)``
    bases of mutually orthogonal spaces (e.g. :func:`key_frequency_bases`).  Returns ``(k,
    len(bases) + 1)``: column ``j`` is :math:`\|F_j^\top v\|^2 / \|v\|^2`, the last column the
    remainder ``1 - sum``, so every row sums to one.
    """
    V = np.asarray(vectors, dtype=np.float64)
    if V.ndim == 1:
        V = V[:, None]
    norms = np.sum(V * V, axis=0)
    if np.any(norms == 0):
        raise InputError("a vector has zero norm")
    shares = [np.sum((F.T @ V) ** 2, axis=0) / norms for F in bases.values()]
    out = np.stack(shares, axis=1)
    return np.concatenate([out, np.clip(1.0 - out.sum(axis=1, keepdims=True), 0.0, None)], axis=1)


def additive_basis(p: int) -> np.ndarray:
    r"""Orthonormal basis ``(p², 2p-1)`` of the *additive* functions :math:`g(a) + h(b)` on the grid
    (the constant plus the functions of :math:`a` alone and of :math:`b` alone)."""
    return np.concatenate([np.full((p * p, 1), 1.0 / p), fourier_basis(p, ("a", "b"))], axis=1)


def additive_dimension(p: int) -> int:
    """Dimension ``2p - 1`` of the additive functions on the ``p x p`` grid (p odd)."""
    return 2 * p - 1


def additive_chance(p: int, k: int, d: int, **kw) -> RandomOverlap:
    r"""Chance overlap of a random k-dimensional subspace *of the additive functions* with a fixed
    d-dimensional subspace of them (e.g. the axis-sum features at the key frequencies).

    Kernels whose eigenvectors are (nearly) additive, such as the embedding's and attention's
    early in training, make the usual chance level :math:`kd/p^2` far too lenient: their top
    eigenvectors are random only within the :math:`2p-1` additive dimensions, so the fair level
    is :math:`kd/(2p-1)` (:func:`random_subspace_overlap` with ``n = 2p - 1``).
    """
    return random_subspace_overlap(additive_dimension(p), k, d, **kw)


@dataclass(frozen=True)
class KeyFrequencies:
    """Key frequencies read off the Fourier power of an embedding.

    ``power[k-1]`` is the power at frequency ``k = 1 .. ⌊p/2⌋`` as a fraction of the total
    non-constant power; ``norm`` the Frobenius norm of the projection (unnormalised);
    ``frequencies`` those with ``power >= threshold * max(power)``, strongest first.
    """

    frequencies: tuple[int, ...]
    power: np.ndarray
    norm: np.ndarray
    threshold: float


def embedding_fourier_power(W, p: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Fourier power of an embedding over the residues: ``(fraction (⌊p/2⌋,), norm (⌊p/2⌋,))``.

    ``W`` ``(V, d)`` with rows ``0 .. p-1`` the embeddings of the residues (extra rows, such as the
    ``=`` token, are ignored).  With :math:`B_k` the orthonormal ``(p, 2)`` basis of
    :math:`\cos, \sin(2\pi k a/p)`, the norm is :math:`\|B_k^\top W\|_F` and the power its square
    divided by :math:`\sum_{k \ge 1} \|B_k^\top W\|_F^2` (the constant is left out).
    """
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] < p:
        raise InputError(f"W must be (V, d) with V >= p = {p} rows, got shape {W.shape}")
    a = np.arange(p)
    ks = np.arange(1, p // 2 + 1)
    norms = np.empty(ks.size)
    for i, k in enumerate(ks):
        B = np.stack([np.cos(2 * np.pi * k * a / p), np.sin(2 * np.pi * k * a / p)], axis=1)
        B = orthonormal_basis(B, center=False)
        norms[i] = np.linalg.norm(B.T @ W[:p])
    power = norms**2
    return power / power.sum(), norms


def key_frequencies(W, p: int, threshold: float = 0.25) -> KeyFrequencies:
    """Key frequencies of an embedding ``W`` ``(V, d)``: those whose Fourier power is at least
    ``threshold`` times the largest (see :func:`embedding_fourier_power`), strongest first."""
    if not 0.0 < threshold <= 1.0:
        raise InputError(f"threshold must lie in (0, 1], got {threshold}")
    power, norm = embedding_fourier_power(W, p)
    keep = np.flatnonzero(power >= threshold * power.max())
    order = keep[np.argsort(-power[keep], kind="stable")]
    return KeyFrequencies(tuple(int(i) + 1 for i in order), power, norm, float(threshold))

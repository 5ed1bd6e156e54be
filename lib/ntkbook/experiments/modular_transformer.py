"""Paper B: the one-layer transformer on modular addition: key frequencies, layer-wise eNTK, dynamics.

Runs
    ``replay``   the author's run replayed exactly: his initial weights, split and per-epoch batch
                 order (:func:`ntkbook.data.load_transformer_replay`), his hyper-parameters (p = 29,
                 50% split, AdamW lr 3e-4, weight decay 1, batches of 64 with the last one of 36
                 kept), in float64, for ``replay_epochs`` epochs;
    ``seed=s``   our own runs at the config's settings: :func:`ntkbook.models.transformer.init` with
                 ``PRNGKey(s)``, split :func:`ntkbook.models.transformer.split` with seed ``s``,
                 shuffling seeded by ``s``, in ``dtype``.

For every run: the training and test loss and accuracy after every epoch; every
``snapshot_every`` epochs (at the author's logging epochs) the embedding's Fourier power and the
top eigenvectors of the W_U and W_out mean-logit kernels, by the cheap exact route (they are
``H H^T / C`` and ``|W_U 1|² A A^T / C²`` with ``H`` the final residual stream and ``A`` the MLP
activations at the read-out position, so their eigenvectors are left singular vectors of ``H`` and
``A``); at the end the key frequencies (:func:`ntkbook.ntk.features.key_frequencies`), the overlaps of
every snapshot with the Fourier features at those frequencies, and, for a run that grokked, the
nine layer-wise mean-logit eNTKs on all ``p²`` inputs with their spectra and the Fourier content
of their top eigenvectors.  For the *main* run (the replay when it runs for ``epochs``, else the
first seed) also the class-diagonal trace kernels and a Lanczos-versus-dense comparison.

Each run is one checkpointed point, so an interrupted paper run resumes.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.linalg

from ntkbook.errors import ConfigError, InputError
from ntkbook import data
from ntkbook.ntk import eig
from ntkbook.ntk import entk
from ntkbook.ntk import features
from ntkbook.models import transformer
from ntkbook import validate as v
from ntkbook.progress import Progress
from ntkbook.stats import first_crossing
from ntkbook.store import PointStore, Result
from ntkbook import train
from ntkbook.train import fit, training_record
from ntkbook.verdicts import ladder

NAME = "modular_transformer"
VERSION = "2"  # 2: the attention block's kernel, the window-edge ratios, the seed record in the scorecard
#: the precision of the engine's materialised kernels (ntkbook.ntk.entk.PRECISIONS), recorded in
#: each new result's provenance: float64 throughout, as the stored layer-wise spectra were computed
PRECISION = "float64"

#: how a rerun is compared with the stored result (:mod:`ntkbook.freshness`). Measured on a
#: rerun on another x86 CPU (2026-12-04): the stored eigenvectors came back with some columns
#: negated (an eigenvector is defined only up to sign) and, once aligned, an entry off by 7e-9
#: (2.5e-8 of the largest entry; they are stored in float32, whose round-off is 1.2e-7 of it);
#: Lanczos's largest relative error against the dense spectrum, about 1e-15 by construction,
#: moved by up to a factor of two. So eigenvectors are compared up to sign and to float32
#: round-off (1e-6 of the largest entry), and that Lanczos error to within an order of magnitude.
REPRODUCE_TOLERANCE = {
    "up_to_sign": {"*ml_eigenvectors/*": "eigenvectors (columns) are defined only up to sign"},
    "loose": {"*ml_eigenvectors/*": {"atol": 1e-6},
              "*.lanczos.*.max_rel_error": {"rtol": 10.0}},
}

#: scalars that may be non-finite, and why (:func:`ntkbook.experiments.check_finite`)
NONFINITE_ALLOWED = {
    "per_run.*.grokking.*": "NaN when the run never reaches that milestone (memorisation, a test "
                            "accuracy level, grokking)",
}

#: The author's printed training log (notebook modular_arithmetic_transformer_v4.ipynb, output of
#: the training cell): {author's epoch: (mean training loss of that epoch, test accuracy in %)}.
#: His "epoch e" is printed after e + 1 epochs of training.  A selection of the 200 lines.
AUTHOR_LOG: dict[int, tuple[float, float]] = {
    0: (3.4278, 3.8), 20: (3.2946, 0.7), 40: (3.1861, 0.7), 60: (2.9855, 0.7), 80: (2.6904, 0.5),
    100: (2.2176, 1.9), 120: (1.6953, 4.3), 140: (1.2189, 9.0), 160: (0.8084, 15.0),
    180: (0.5413, 18.8), 200: (0.3566, 22.3), 500: (0.0514, 33.5), 600: (0.0348, 37.1),
    1000: (0.0076, 59.1), 1500: (0.0012, 91.0), 1820: (0.0003, 99.0), 1900: (0.0002, 100.0),
}
#: The author's other reported numbers (notebook outputs; Paper B, Table 2 and Fig. 3).
AUTHOR = {
    "key_frequencies": (1, 12),
    "key_norms": (3.8, 3.65),
    "W_U_sum_top5": 3.9647,  # eigenvectors 0-4 vs cos/sin ω(a+b), out of 4
    "W_U_axis_sum_5to8": 3.9399,  # eigenvectors 5-8 vs cos ωa + cos ωb, sin ωa + sin ωb, out of 4
    # W_U overlap over training, read from the figure (fraction of 4)
    "W_U_dynamics": {200: 0.25, 500: 0.47, 600: 0.62, 1000: 0.80, 1900: 0.97, 4000: 0.99},
    "derivative_peaks": (150, 600),
    "grokking_lines": (150, 1900),
}
#: The paper's claim: which Fourier family each parameter group's top eigenvectors align with
#: (None: the paper makes no claim for the group).
CLAIMS: dict[str, str | None] = {
    "W_E": None, "W_pos": None, "W_Q": "axis_sum", "W_K": "axis_sum", "W_V": "axis_sum",
    "W_O": "axis_sum", "W_in": "axis_sum", "W_out": "sum", "W_U": "sum",
}
#: blocks of tensors whose kernel (the sum of the tensors' kernels: they hold disjoint parameters)
#: the paper makes a claim for as a whole, and the claimed family
BLOCKS: dict[str, tuple[str, ...]] = {"attention": ("W_Q", "W_K", "W_V", "W_O")}
BLOCK_CLAIMS: dict[str, str] = {"attention": "axis_sum"}
#: the verdict of a group for which the paper makes no claim (not a scorecard verdict)
NO_CLAIM = "no claim"
#: names of the content columns (features.CONTENT_KINDS plus the remainder)
CONTENT_NAMES = features.CONTENT_KINDS + ("other",)
#: dynamics metrics: (kernel, window, features); window "2K+1" = the author's top-5 for K = 2
DYN_METRICS = (("W_U", "2K+1", "sum"), ("W_U", "4K+1", "sum"), ("W_U", "4K+1", "axis_sum"),
               ("W_out", "2K+1", "sum"), ("W_out", "4K+1", "sum"), ("W_out", "4K+1", "axis_sum"))

#: a run's training curves: history entry -> array name (stored under ``"<run>/<name>"``)
HIST_ARRAYS = {"epoch": "hist_epoch", "train_loss": "hist_train_loss", "train_acc": "hist_train_acc",
               "test_acc": "hist_test_acc", "test_loss": "hist_test_loss"}

AUTHOR_SETTINGS = dict(p=29, train_fraction=0.5, lr=3e-4, weight_decay=1.0, batch_size=64)


@dataclasses.dataclass(frozen=True)
class Config:
    """The one-layer transformer on addition mod ``p``: the author's run replayed and our own seeds,
    their key frequencies, layer-wise mean-logit eNTKs and the dynamics of their Fourier content.

    Presets: ``paper()`` the author's settings (p = 29, 50 % split, lr 3e-4, weight decay 1, 4000
    epochs) with the full replay and five seeds; ``smoke()`` the fast-grokking setting (70 % split,
    lr 1e-3, 800 epochs, two seeds), the replay checked for its first 41 epochs, no trace kernels.
    """

    p: int = 29  # the modulus: inputs (a, b, =), labels (a + b) mod p
    d_model: int = 64  # residual-stream width
    n_heads: int = 4  # attention heads
    d_head: int = 16  # width of each head
    d_mlp: int = 256  # hidden units of the MLP
    train_fraction: float = 0.5  # share of the p² pairs trained on
    lr: float = 3e-4  # AdamW learning rate
    weight_decay: float = 1.0  # AdamW weight decay
    batch_size: int = 64  # mini-batch size (the last, smaller batch of an epoch is kept)
    epochs: int = 4000  # epochs of the seed runs
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)  # one run per seed (initialisation, split, shuffling)
    dtype: str = "float32"  # precision of the seed runs (the replay is always float64)
    replay_epochs: int = 4000  # epochs of the author's run replayed (0: no replay)
    snapshot_every: int = 20  # epochs between snapshots (Fourier power, top kernel eigenvectors)
    key_threshold: float = 0.25  # key frequency: Fourier power >= this fraction of the largest
    grok_level: float = 0.99  # a run "groks" when its test accuracy reaches this
    n_eigvecs: int = 16  # eigenvectors per group analysed for content (and kept, main run)
    trace_kernels: bool = True  # class-diagonal trace kernels of the main run
    lanczos_k: int = 10  # eigenpairs of the Lanczos-versus-dense comparison (0: skip it)

    @classmethod
    def smoke(cls) -> "Config":
        # The fast-grokking setting (all seeds tried grok by epoch ~600); the replay is
        # checked for its first 41 epochs only (the author's log at epochs 0, 20, 40); the nine
        # trace kernels (~2 min on 2 CPU cores) are left to the paper scale.
        return cls(train_fraction=0.7, lr=1e-3, epochs=800, seeds=(0, 1), replay_epochs=41,
                   n_eigvecs=12, trace_kernels=False, snapshot_every=40)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        v.int_at_least(NAME, "p", self.p, 3)
        for field in ("d_model", "n_heads", "d_head", "d_mlp"):
            v.positive_int(NAME, field, getattr(self, field))
        v.fraction(NAME, "train_fraction", self.train_fraction)
        v.finite_positive(NAME, "lr", self.lr)
        v.finite_non_negative(NAME, "weight_decay", self.weight_decay)
        v.positive_int(NAME, "batch_size", self.batch_size)
        v.positive_int(NAME, "epochs", self.epochs)
        v.non_empty(NAME, "seeds", self.seeds)
        v.each(v.int_at_least, NAME, "seeds", self.seeds, 0, "a JAX seed")
        v.unique(NAME, "seeds", self.seeds)
        v.one_of(NAME, "dtype", self.dtype, ("float32", "float64"))
        v.int_at_least(NAME, "replay_epochs", self.replay_epochs, 0)
        v.require(NAME, "replay_epochs", self.replay_epochs,
                  self.replay_epochs == 0 or (self.p == 29 and self.shape == transformer.Shape()),
                  "0 unless the model is the author's (p = 29, d_model 64, 4 heads of 16, d_mlp 256)",
                  "the replay runs the author's recorded model")
        v.positive_int(NAME, "snapshot_every", self.snapshot_every)
        v.fraction(NAME, "key_threshold", self.key_threshold, high_closed=True)
        v.fraction(NAME, "grok_level", self.grok_level, "a test accuracy", high_closed=True)
        v.positive_int(NAME, "n_eigvecs", self.n_eigvecs)
        v.boolean(NAME, "trace_kernels", self.trace_kernels)
        v.int_at_least(NAME, "lanczos_k", self.lanczos_k, 0)

    @property
    def shape(self) -> transformer.Shape:
        return transformer.Shape(self.p, self.d_model, self.n_heads, self.d_head, self.d_mlp)


def main_run(config: Config) -> str:
    """The run whose kernels are analysed in full: the replay when it covers ``epochs`` at the
    author's settings, else the first seed."""
    author = all(getattr(config, k) == v for k, v in AUTHOR_SETTINGS.items())
    if config.replay_epochs >= config.epochs and author:
        return "replay"
    return f"seed={config.seeds[0]}"


def estimate_seconds(config: Config) -> float:
    """Rough time on 2 shared CPU cores (measured: 4000 float64 replay epochs ~25-60 s; the nine
    mean-logit kernels ~4 s; the nine trace kernels ~1-3 min)."""
    n_train = int(config.train_fraction * config.p**2)
    steps = math.ceil(n_train / config.batch_size)
    per_epoch = 1.5e-3 * steps * (config.batch_size / 64)
    total = len(config.seeds) * (config.epochs * per_epoch + 15.0)
    total += config.replay_epochs * 7 * 1.5e-3 * 1.5 + 15.0
    if config.trace_kernels:
        total += 120.0 * (config.p / 29) ** 4
    return float(total)


# --------------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------------
def _snapshot_epochs(epochs: int, every: int) -> list[int]:
    """0, then the author's logging epochs (his epoch e = our e + 1), then the last epoch."""
    e = [0] + list(range(1, epochs + 1, every))
    if e[-1] != epochs:
        e.append(epochs)
    return e


def train_run(params, train_x, train_y, test_x, test_y, *, p: int, lr: float, weight_decay: float,
              batch_size: int, epochs: int, seed: int = 0, batch_order=None,
              snapshot_epochs=(), desc: str = "training"):
    """AdamW (torch's defaults: betas (0.9, 0.999), eps 1e-8) on the cross-entropy of the first
    ``p`` logits, mini-batches of ``batch_size`` with the last incomplete one kept.

    Returns ``(history, snapshots)``: ``history`` has ``epoch``, ``train_loss`` (mean over the
    epoch's steps; at 0 the initial loss), ``train_acc``, ``test_acc``, ``test_loss`` after every
    epoch; ``snapshots`` maps each of ``snapshot_epochs`` to the parameters (numpy).
    """
    batched = jax.vmap(transformer.apply, in_axes=(None, 0))
    xtr, ytr, xte, yte = (jnp.asarray(v) for v in (train_x, train_y, test_x, test_y))

    def loss_fn(prm, batch):
        xb, yb = batch
        return transformer.cross_entropy(batched(prm, xb), yb, p)

    @jax.jit
    def metrics_jit(prm):
        otr, ote = batched(prm, xtr), batched(prm, xte)
        return jnp.stack([transformer.accuracy(otr, ytr, p), transformer.accuracy(ote, yte, p),
                          transformer.cross_entropy(ote, yte, p)])

    def metrics(prm):
        v = np.asarray(metrics_jit(prm))
        return {"train_acc": v[0], "test_acc": v[1], "test_loss": v[2]}

    snaps: dict[int, dict[str, np.ndarray]] = {}
    wanted = set(snapshot_epochs)

    def callback(epoch, prm):
        if epoch in wanted:
            snaps[epoch] = {k: np.asarray(v) for k, v in prm.items()}

    opt = optax.adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=weight_decay)
    res = fit(loss_fn, params, opt, (xtr, ytr), epochs=epochs, batch_size=batch_size, seed=seed,
              metrics=metrics, log_every=1, callback=callback, desc=desc, batch_order=batch_order)
    h = res.history
    hist = {"epoch": np.asarray(h["epoch"], dtype=np.int64),
            "train_loss": np.asarray(h["loss"], dtype=np.float64)}
    for k in ("train_acc", "test_acc", "test_loss"):
        hist[k] = np.asarray(h[k], dtype=np.float64)
    return hist, snaps


def grokking_summary(hist: dict, grok_level: float) -> dict[str, float]:
    ep, te, tr = hist["epoch"], hist["test_acc"], hist["train_acc"]
    return {
        "memorisation": first_crossing(ep, tr, 0.99),
        "test10": first_crossing(ep, te, 0.10),
        "test50": first_crossing(ep, te, 0.50),
        "test90": first_crossing(ep, te, 0.90),
        "test_grok": first_crossing(ep, te, grok_level),
        "grokked": bool(np.any(te >= grok_level)),
        "final_train_acc": float(tr[-1]),
        "final_test_acc": float(te[-1]),
        "final_train_loss": float(hist["train_loss"][-1]),
    }


# --------------------------------------------------------------------------------------------------
# kernels and their Fourier content
# --------------------------------------------------------------------------------------------------
_hidden_batch = jax.jit(jax.vmap(transformer.hidden, in_axes=(None, 0)))


def readout_features(params, p: int) -> tuple[np.ndarray, np.ndarray]:
    """``(H (p², d), A (p², d_mlp))``: final residual stream and MLP activations at position 2."""
    x, _ = transformer.dataset(p)
    h = _hidden_batch(params, jnp.asarray(x))
    return np.asarray(h["resid2"], dtype=np.float64), np.asarray(h["mlp"], dtype=np.float64)


def cheap_top_vectors(params, p: int, k: int) -> dict[str, np.ndarray]:
    """Top-``k`` eigenvectors of the W_U and W_out mean-logit kernels from SVDs (no eNTK).

    The mean-logit W_U kernel is ``H H^T / C`` and the W_out kernel ``|W_U 1|² A A^T / C²`` (see
    the chapter), so their eigenvectors are the left singular vectors of ``H`` and ``A``.
    """
    H, A = readout_features(params, p)
    out = {}
    for name, M in (("W_U", H), ("W_out", A)):
        # left singular vectors from the small Gram matrix M^T M (d x d): U_k = M V_k / s_k
        w, V = np.linalg.eigh(M.T @ M)
        w, V = w[::-1][:k], V[:, ::-1][:, :k]
        s = np.sqrt(np.clip(w, 0.0, None))
        if s[-1] <= 1e-10 * s[0]:
            raise InputError(f"{name}: fewer than {k} non-zero singular values; lower k")
        out[name] = (M @ V) / s
        out[name + "_sv"] = s
    return out


def _window(name: str, K: int) -> int:
    return {"2K+1": 2 * K + 1, "4K+1": 4 * K + 1}[name]


def dynamics_overlaps(top: dict[str, np.ndarray], bases: dict[str, np.ndarray], K: int) -> np.ndarray:
    """The :data:`DYN_METRICS` overlaps (fractions of 2K) of one snapshot's top vectors."""
    vals = []
    for kernel, window, feat in DYN_METRICS:
        Q = top[kernel][:, :_window(window, K)]
        vals.append(features.subspace_overlap(Q, bases[feat], orthonormalize=False) / bases[feat].shape[1])
    return np.asarray(vals)


def group_layers() -> dict[str, str]:
    """One eNTK parameter group per parameter tensor (the author's nine groups)."""
    return {n: rf"\['{n}'\]" for n in transformer.PARAM_NAMES}


def group_kernels(params, p: int, reduction: str, batch_size: int | None = None) -> dict[str, np.ndarray]:
    """The nine layer-wise eNTKs ``(p², p²)`` on all inputs, float64.

    ``reduction`` ``"mean_logit"`` (the author's: the full kernel averaged over all ``C × C``
    output pairs, :func:`ntkbook.ntk.entk.entk_mean_logit`) or ``"trace"`` (the class-diagonal trace
    ``(1/C) Σ_c K_cc``, the engine's ``"class_mean"``), with ``C = p + 1`` logits.
    """
    x, _ = transformer.dataset(p)
    x = jnp.asarray(x)
    p64 = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in params.items()}
    if reduction == "mean_logit":
        ks = entk.entk_mean_logit(transformer.apply, p64, x, layers=group_layers(), batch_size=batch_size,
                                  precision=PRECISION)
    elif reduction == "trace":
        ks = entk.entk_layerwise(transformer.apply, p64, x, layers=group_layers(), reduction="class_mean",
                                  batch_size=batch_size or 64, precision=PRECISION)
    else:
        raise InputError(f"reduction must be 'mean_logit' or 'trace', got {reduction!r}")
    return {k: np.asarray(v, dtype=np.float64) for k, v in ks.items()}


def leading_family(content: np.ndarray, n: int) -> str:
    """The Fourier family that comes first: among the top eigenvectors whose largest share is not
    the constant, take the first ``n`` and return the family (axis sum, axis difference, sum or
    difference) holding most of their weight.  ``content`` rows as from
    :func:`ntkbook.ntk.features.fourier_content`, in rank order."""
    rows = [c for c in content if int(np.argmax(c)) != 0][:n]
    if not rows:
        return "const"
    w = np.sum(rows, axis=0)[1:len(features.CONTENT_KINDS)]  # axis_sum, axis_diff, sum, diff
    return features.CONTENT_KINDS[1 + int(np.argmax(w))]


def analyse_group(K: np.ndarray, p: int, bases: dict[str, np.ndarray], n_keep: int) -> dict[str, Any]:
    """Spectrum and Fourier content of one ``(p², p²)`` kernel at the key frequencies.

    Cliffs: :func:`ntkbook.ntk.features.find_cliffs` on the top 40 eigenvalues (at most two, blocks of
    one allowed).  Window: the top ``4K+1`` eigenvectors (constant + axis sum + sum if the paper's picture holds,
    K key frequencies).  Returned: eigenvalues (descending, all), the top ``n_keep`` eigenvectors,
    their content shares and additive shares, the window's overlaps with every family (fractions of
    2K) with the uniform (``kd/p²``) and additive (``kd/(2p-1)``) chance levels, and the family
    holding most of the window's weight.
    """
    lam, vec = scipy.linalg.eigh(K)
    lam, vec = lam[::-1].copy(), vec[:, ::-1].copy()
    d = bases["sum"].shape[1]
    Kf = d // 2
    w = 4 * Kf + 1
    top = vec[:, :max(n_keep, w)]
    content = features.fourier_content(top, bases)
    add = features.additive_basis(p)
    additive_share = np.sum((add.T @ top) ** 2, axis=0)
    overlaps = {f: features.subspace_overlap(top[:, :w], bases[f], orthonormalize=False) / bases[f].shape[1]
                for f in features.CONTENT_KINDS if f != "const"}
    N = p * p
    # cliffs of the top 40 (the constant mode may sit inside a block, so blocks of one count)
    cl = features.find_cliffs(np.clip(lam[:40], np.finfo(float).tiny, None), n=2, min_size=1)
    ratio = lambda e: float(lam[e - 1] / lam[e]) if lam[e] > 0 else math.inf  # noqa: E731
    return {
        "cliff_edges": list(cl.edges),
        "cliff_ratios": list(cl.ratios),
        # the drop after the 2K+1-th and the 4K+1-th eigenvalue: the edges of the author's windows,
        # whether or not the cliff rule counts them as cliffs
        "window_edge_ratios": {"2K+1": ratio(2 * Kf + 1), "4K+1": ratio(w)},
        "eigenvalues": lam,
        "eigenvectors": top[:, :n_keep],
        "content": content[:n_keep],
        "additive_share": additive_share[:n_keep],
        "window": w,
        "overlaps": overlaps,
        "chance_uniform": w * d / N / d,
        "chance_additive": features.additive_chance(p, w, d).mean / d,
        "leading": leading_family(content, d),
        "window_additive_share": float(np.mean(additive_share[:w])),
    }


def claim_verdict(claim: str | None, info: dict[str, Any], level: float = 0.9) -> str:
    """The paper's claim for a group, checked: ``"reproduces"`` when the claimed family has overlap
    ≥ ``level`` with the window and comes first; ``"partly"`` when only one of the two holds and the
    overlap is at least 0.5 (the family is in the window but another comes first, or it comes
    first but the window holds less than ``level`` of it); ``"does not"`` otherwise;
    :data:`NO_CLAIM` for the groups the paper leaves out."""
    if claim is None:
        return NO_CLAIM
    ov = info["overlaps"][claim]
    first = info["leading"] == claim
    return ladder(ov >= level and first, ov >= 0.5 and (first or ov >= level))


def lanczos_vs_dense(params, p: int, kernels: dict[str, np.ndarray], k: int) -> dict[str, Any]:
    """Per group: top-``k`` eigenvalues of the matrix-free mean-logit operator by Lanczos with the
    default ``2k + 10`` products and with ``6k`` products, against the dense ``eigh``."""
    x, _ = transformer.dataset(p)
    x = jnp.asarray(x)
    p64 = {kk: jnp.asarray(v, dtype=jnp.float64) for kk, v in params.items()}
    out = {}
    for name, flt in group_layers().items():
        lam_all, vec_d = scipy.linalg.eigh(kernels[name])
        lam_all, vec_d = lam_all[::-1], vec_d[:, ::-1][:, :k]
        lam_d = lam_all[:k]
        op = entk.entk_matvec_mean_logit(transformer.apply, p64, x, param_filter=flt)
        # the gap after the k-th eigenvalue sets how fast Lanczos converges
        row = {"dense": lam_d.tolist(), "gap_ratio": float(lam_all[k - 1] / lam_all[k]),
               "spread_top": float(lam_all[k - 1] / lam_all[0])}
        for label, steps in (("default", None), ("long", 6 * k)):
            t0 = time.perf_counter()
            lz = eig.lanczos_topk(op, p * p, k, num_steps=steps, seed=0)
            lam_l = np.asarray(lz.eigenvalues)
            vec_l = np.asarray(lz.eigenvectors)
            rel = np.abs(lam_l - lam_d) / np.abs(lam_d[0])
            row[label] = {
                "num_matvecs": int(lz.num_matvecs),
                "eigenvalues": lam_l.tolist(),
                "max_rel_error": float(rel.max()),
                "subspace_overlap": features.subspace_overlap(vec_l, vec_d, orthonormalize=False) / k,
                "seconds": time.perf_counter() - t0,
            }
        out[name] = row
    return out


# --------------------------------------------------------------------------------------------------
# one run
# --------------------------------------------------------------------------------------------------
def _setup(config: Config, run: str):
    """(initial params, train/test tokens and labels, batch order, epochs, seed, dtype) of a run."""
    X, Y = transformer.dataset(config.p)
    if run == "replay":
        rp = data.load_transformer_replay()
        params = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in rp.params.items()}
        tr, te = transformer.rows_of(rp.train_x, 29), transformer.rows_of(rp.test_x, 29)
        epochs = config.replay_epochs
        if epochs > rp.perms.shape[0]:
            raise ConfigError(f"{NAME}.replay_epochs={epochs} exceeds the {rp.perms.shape[0]} recorded epochs; lower it")
        s = AUTHOR_SETTINGS
        return (params, X[tr], Y[tr], X[te], Y[te], rp.perms[:epochs], epochs, 0,
                dict(lr=s["lr"], weight_decay=s["weight_decay"], batch_size=s["batch_size"]))
    seed = int(run.split("=")[1])
    dtype = {"float32": jnp.float32, "float64": jnp.float64}[config.dtype]
    params = transformer.init(jax.random.PRNGKey(seed), config.shape, dtype=dtype)
    tr, te = transformer.split(config.p, config.train_fraction, seed)
    return (params, X[tr], Y[tr], X[te], Y[te], None, config.epochs, seed,
            dict(lr=config.lr, weight_decay=config.weight_decay, batch_size=config.batch_size))


def run_one(config: Config, run: str, *, analyse: bool) -> tuple[dict, dict]:
    """Train one run and analyse it; returns the point's ``(arrays, scalars)``."""
    with jax.enable_x64(True):  # the replay and the kernels in float64; float32 seeds stay float32
        return _run_one(config, run, analyse=analyse)


def _run_one(config: Config, run: str, *, analyse: bool) -> tuple[dict, dict]:
    params, xtr, ytr, xte, yte, order, epochs, seed, hp = _setup(config, run)
    p = config.p
    snap_epochs = _snapshot_epochs(epochs, config.snapshot_every)
    t0 = time.perf_counter()
    hist, snaps = train_run(params, xtr, ytr, xte, yte, p=p, epochs=epochs, seed=seed,
                            batch_order=order, snapshot_epochs=snap_epochs, desc=run, **hp)
    t_train = time.perf_counter() - t0
    final = snaps[epochs]
    kf = features.key_frequencies(final["W_E"], p, config.key_threshold)
    bases = features.key_frequency_bases(p, kf.frequencies)
    K = len(kf.frequencies)
    arrays: dict[str, np.ndarray] = {HIST_ARRAYS[k]: v for k, v in hist.items()}
    dyn, powers = [], []
    t0 = time.perf_counter()
    for e in snap_epochs:
        prm = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in snaps[e].items()}
        dyn.append(dynamics_overlaps(cheap_top_vectors(prm, p, 4 * K + 1), bases, K))
        powers.append(features.embedding_fourier_power(snaps[e]["W_E"], p)[0])
    arrays["snapshot_epochs"] = np.asarray(snap_epochs, dtype=np.int64)
    arrays["dynamics"] = np.stack(dyn)
    arrays["power"] = np.stack(powers)
    scalars: dict[str, Any] = {
        "key_frequencies": list(kf.frequencies),
        "key_power": kf.power.tolist(),
        "key_norm": kf.norm.tolist(),
        "grokking": grokking_summary(hist, config.grok_level),
        "train_seconds": t_train,
        "dynamics_seconds": time.perf_counter() - t0,
        "epochs": epochs,
    }
    if analyse:
        t0 = time.perf_counter()
        kernels = group_kernels(final, p, "mean_logit")
        scalars["kernel_seconds"] = time.perf_counter() - t0
        groups = {}
        for name, Kg in kernels.items():
            info = analyse_group(Kg, p, bases, config.n_eigvecs)
            arrays[f"ml_eigenvalues/{name}"] = info.pop("eigenvalues")
            arrays[f"ml_eigenvectors/{name}"] = info.pop("eigenvectors").astype(np.float32)
            arrays[f"ml_content/{name}"] = info.pop("content")
            arrays[f"ml_additive/{name}"] = info.pop("additive_share")
            info["verdict"] = claim_verdict(CLAIMS[name], info)
            groups[name] = info
        scalars["groups"] = groups
        blocks = {}
        for name, members in BLOCKS.items():
            info = analyse_group(sum(kernels[m] for m in members), p, bases, config.n_eigvecs)
            arrays[f"ml_eigenvalues/{name}"] = info.pop("eigenvalues")
            arrays[f"ml_eigenvectors/{name}"] = info.pop("eigenvectors").astype(np.float32)
            arrays[f"ml_content/{name}"] = info.pop("content")
            arrays[f"ml_additive/{name}"] = info.pop("additive_share")
            info["members"] = list(members)
            info["verdict"] = claim_verdict(BLOCK_CLAIMS[name], info)
            blocks[name] = info
        scalars["blocks"] = blocks
        # the author's two W_U windows: eigenvectors 0-4 vs sum, 5-8 vs axis sum (fractions of 2K)
        V = arrays["ml_eigenvectors/W_U"].astype(np.float64)
        scalars["W_U_author_windows"] = {
            "sum_top": features.subspace_overlap(V[:, :2 * K + 1], bases["sum"]) ,
            "axis_sum_next": features.subspace_overlap(V[:, 2 * K + 1:4 * K + 1], bases["axis_sum"]),
            "dim": 2 * K,
        }
        arrays["final_params_flat"] = np.concatenate([np.asarray(final[n], np.float64).ravel()
                                                      for n in transformer.PARAM_NAMES])
    return arrays, scalars


def _unflatten(flat: np.ndarray, shape: transformer.Shape) -> dict[str, np.ndarray]:
    out, i = {}, 0
    for n, s in transformer.param_shapes(shape).items():
        m = int(np.prod(s))
        out[n] = flat[i:i + m].reshape(s)
        i += m
    return out


def analyse_main(config: Config, params: dict, key_freqs) -> tuple[dict, dict]:
    """Trace kernels (content and spectra) and Lanczos against dense for the main run."""
    p = config.p
    bases = features.key_frequency_bases(p, key_freqs)
    arrays, scalars = {}, {}
    with jax.enable_x64(True):
        ml = group_kernels(params, p, "mean_logit")
        if config.trace_kernels:
            t0 = time.perf_counter()
            tr = group_kernels(params, p, "trace")
            scalars["trace_seconds"] = time.perf_counter() - t0
            groups = {}
            for name, Kg in tr.items():
                info = analyse_group(Kg, p, bases, config.n_eigvecs)
                arrays[f"tr_eigenvalues/{name}"] = info.pop("eigenvalues")
                arrays[f"tr_content/{name}"] = info.pop("content")
                info.pop("eigenvectors")
                info.pop("additive_share")
                info["verdict"] = claim_verdict(CLAIMS[name], info)
                # agreement of the two reductions: top-window subspaces and spectral shapes
                lm, vm = scipy.linalg.eigh(ml[name])
                lt, vt = scipy.linalg.eigh(Kg)
                w = info["window"]
                info["window_overlap_with_mean_logit"] = features.subspace_overlap(
                    vm[:, ::-1][:, :w], vt[:, ::-1][:, :w], orthonormalize=False) / w
                info["kernel_correlation"] = float(np.corrcoef(ml[name].ravel(), Kg.ravel())[0, 1])
                info["scale_ratio"] = float(np.trace(Kg) / np.trace(ml[name]))
                groups[name] = info
            scalars["trace_groups"] = groups
        if config.lanczos_k:
            t0 = time.perf_counter()
            scalars["lanczos"] = lanczos_vs_dense(params, p, ml, config.lanczos_k)
            scalars["lanczos_seconds"] = time.perf_counter() - t0
    return arrays, scalars


# --------------------------------------------------------------------------------------------------
# the experiment
# --------------------------------------------------------------------------------------------------
def run_names(config: Config) -> list[str]:
    return (["replay"] if config.replay_epochs > 0 else []) + [f"seed={s}" for s in config.seeds]


def run(config: Config, points: PointStore | None = None) -> Result:
    """Train and analyse the replay and every seed (one checkpointed point each), then the main
    run's trace kernels and Lanczos comparison, and assemble the result (see the module
    docstring)."""
    points = points or PointStore(None)
    names = run_names(config)
    main = main_run(config)
    bar = Progress(len(names) + 1, desc=f"{NAME} p={config.p}")
    runs: dict[str, tuple[dict, dict]] = {}
    for name in names:
        # every run that reaches the config's epoch count gets the per-group analysis
        full = name != "replay" or name == main
        runs[name] = points.cached(f"run={name}", lambda name=name, full=full: run_one(
            config, name, analyse=full))
        g = runs[name][1]["grokking"]
        bar.set_postfix(run=name, test_acc=g["final_test_acc"])
        bar.update()
    arrays_m, scalars_m = runs[main]
    params = _unflatten(np.asarray(arrays_m["final_params_flat"]), config.shape)
    extra = points.cached("main_analysis", lambda: analyse_main(
        config, params, scalars_m["key_frequencies"]))
    bar.update()
    bar.close()
    return _assemble(config, names, main, runs, extra)


def _assemble(config, names, main, runs, extra) -> Result:
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {"runs": names, "main": main, "group_names": list(transformer.PARAM_NAMES),
                               "claims": CLAIMS, "content_names": list(CONTENT_NAMES),
                               "dyn_metrics": [list(m) for m in DYN_METRICS], "author": AUTHOR,
                               "author_log": {str(k): list(v) for k, v in AUTHOR_LOG.items()}}
    per_run = {}
    for name in names:
        a, s = runs[name]
        for k, v in a.items():
            if k == "final_params_flat" and name != main:
                continue  # the main run's trained weights are kept: its kernels can be recomputed
            if k.startswith(("ml_eigenvectors", "ml_additive")) and name != main:
                continue
            if k.startswith("ml_eigenvalues") and name != main:
                v = np.asarray(v)[:40]
            arrays[f"{name}/{k}"] = np.asarray(v)
        per_run[name] = s
    scalars["per_run"] = per_run
    a, s = extra
    arrays.update({f"main/{k}": v for k, v in a.items()})
    scalars["main_analysis"] = s
    # the replay against the author's log (his epoch e = our epoch e + 1)
    if "replay" in runs:
        h = runs["replay"][0]
        rows = []
        for e_a, (loss_a, acc_a) in AUTHOR_LOG.items():
            e = e_a + 1
            if e < len(h["hist_epoch"]):
                rows.append({"author_epoch": e_a, "author_loss": loss_a, "author_test_acc": acc_a,
                             "loss": float(h["hist_train_loss"][e]),
                             "test_acc": 100.0 * float(h["hist_test_acc"][e])})
        scalars["replay_vs_author"] = rows
    seeds = [n for n in names if n != "replay"]
    analysed = [n for n in names if n != "replay" or n == main]
    scalars["training"] = training_record(
        [per_run[n]["grokking"]["final_train_acc"] for n in analysed],
        [per_run[n]["grokking"]["final_train_loss"] for n in analysed],
        min_train_acc=0.99, labels=analysed)
    scalars["seed_summary"] = {
        "n": len(seeds),
        "grokked": sum(bool(per_run[n]["grokking"]["grokked"]) for n in seeds),
        "epochs": config.epochs,
    }
    return Result(name=NAME, config=dataclasses.asdict(config), arrays=arrays, scalars=scalars)


def require_trained(result: Result) -> None:
    """Raise :class:`ntkbook.train.NotTrained` unless the analysed (main) run reached 99% training
    accuracy; the chapter calls it before drawing conclusions from the main run's kernels."""
    rec = result["training"]
    main = result["main"]
    train.require_trained({**rec, "models": [m for m in rec["models"] if m["label"] == main]},
                     f"{NAME} ({main})")


r"""The interventions of the influence experiments and how far they move NTK influence.

For one trained network (weights frozen throughout):

1. **Influence** (:func:`influences`): the class-diagonal eNTK of ``W``
   (:func:`ntkbook.models.two_layer.entk_W`) on the training points ``K`` and test-train
   ``K_x``, float64; kernel ridge regression with ``A = K + lam I`` on targets ``Y`` (one-hot, or
   ``+-1``); the exact leave-one-out influence of every training point on the summed squared test
   loss (:func:`ntkbook.influence.scores.ntk_influence`), with ``lam`` and with ``n * lam``.
2. **Interventions** (:func:`evaluate`; ``K``, ``K_x`` and, for MLP-Attn, the attention transform
   of the training *and* test points recomputed on the changed training set):

   * ``adversarial``: every training point attacked (FGSM, PGD, MIM);
   * ``transformed``: only the top-``tau`` set ``T`` (by clean ``|I|``) attacked;
   * ``curated``: ``T`` removed; the flip rate is then measured on the top-``tau`` set of the
     remaining points;
   * ``null``: the attack replaced by random signs ``+-eps`` (FGSM's norm), on every point and on T.

   Each attack (:func:`run_attack`) maximises the frozen network's mean training loss
   (:func:`ntkbook.influence.losses.attack_loss`) over the perturbed training set, jointly. Flip
   rate over the top ``tau`` by clean ``|I|``, and Spearman's rho of all influences before and after.
3. Optionally the ``eps`` ablation (``adversarial``, every attack, at each radius).

:data:`SCORE_KEYS` spells out every scalar :func:`evaluate` writes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ntkbook.errors import InputError
from ntkbook.influence import attacks, references, scores
from ntkbook.influence.losses import attack_loss
from ntkbook.influence.tasks import accuracy, targets
from ntkbook.models import attention, two_layer

__all__ = ["INTERVENTIONS", "EvalSettings", "SCORE_KEYS", "influences", "clean_point", "perturbation_size",
           "run_attack", "evaluate"]

#: the interventions :func:`evaluate` knows
INTERVENTIONS = ("adversarial", "transformed", "curated", "null")


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """How the interventions on a trained network are run and measured."""

    lam: float  # KRR ridge: A = K + lam I (the influences are also computed with n * lam)
    top_fraction: float  # tau: the flip rate is taken over the top tau of points by clean |I|
    eps: float  # L-infinity radius of every attack and of the random-sign null
    attacks: tuple[str, ...]  # of "fgsm", "pgd", "mim"
    interventions: tuple[str, ...]  # of "adversarial", "transformed", "curated", "null"
    pgd_steps: int  # PGD: steps from a uniform random start in the ball
    pgd_step_size: float  # PGD: L-infinity size of each step
    #: MIM: steps of eps / mim_steps and the momentum decay (None: MIM is not run)
    mim_steps: int | None = None
    mim_decay: float | None = None
    ablation_eps: tuple[float, ...] = ()  # radii of the eps ablation (when evaluate runs it)


#: every scalar key :func:`evaluate` writes (the eps ablation's ``ablation/<attack>/<eps:g>/flip``
#: and ``.../rho`` depend on the radii and are not listed). Per intervention and attack: the flip
#: rate and Spearman's rho with ``lam`` and with ``n * lam``, the attack's loss before and after,
#: its largest pixel change and the mean L2 norm of a perturbed point.
SCORE_KEYS = frozenset({
    "krr_test_acc", "top_size", "frac_helpful_top",
    "adversarial/fgsm/flip", "adversarial/fgsm/rho", "adversarial/fgsm/flip_nlam",
    "adversarial/fgsm/rho_nlam", "adversarial/fgsm/loss_before", "adversarial/fgsm/loss_after",
    "adversarial/fgsm/linf", "adversarial/fgsm/l2_mean",
    "adversarial/pgd/flip", "adversarial/pgd/rho", "adversarial/pgd/flip_nlam",
    "adversarial/pgd/rho_nlam", "adversarial/pgd/loss_before", "adversarial/pgd/loss_after",
    "adversarial/pgd/linf", "adversarial/pgd/l2_mean",
    "adversarial/mim/flip", "adversarial/mim/rho", "adversarial/mim/flip_nlam",
    "adversarial/mim/rho_nlam", "adversarial/mim/loss_before", "adversarial/mim/loss_after",
    "adversarial/mim/linf", "adversarial/mim/l2_mean",
    "transformed/fgsm/flip", "transformed/fgsm/rho", "transformed/fgsm/flip_nlam",
    "transformed/fgsm/rho_nlam", "transformed/fgsm/loss_before", "transformed/fgsm/loss_after",
    "transformed/fgsm/linf", "transformed/fgsm/l2_mean",
    "transformed/pgd/flip", "transformed/pgd/rho", "transformed/pgd/flip_nlam",
    "transformed/pgd/rho_nlam", "transformed/pgd/loss_before", "transformed/pgd/loss_after",
    "transformed/pgd/linf", "transformed/pgd/l2_mean",
    "transformed/mim/flip", "transformed/mim/rho", "transformed/mim/flip_nlam",
    "transformed/mim/rho_nlam", "transformed/mim/loss_before", "transformed/mim/loss_after",
    "transformed/mim/linf", "transformed/mim/l2_mean",
    "null_adversarial/random/flip", "null_adversarial/random/rho",
    "null_adversarial/random/flip_nlam", "null_adversarial/random/rho_nlam",
    "null_adversarial/random/loss_before", "null_adversarial/random/loss_after",
    "null_adversarial/random/linf", "null_adversarial/random/l2_mean",
    "null_transformed/random/flip", "null_transformed/random/rho",
    "null_transformed/random/flip_nlam", "null_transformed/random/rho_nlam",
    "null_transformed/random/loss_before", "null_transformed/random/loss_after",
    "null_transformed/random/linf", "null_transformed/random/l2_mean",
    "curated/flip", "curated/rho", "curated/flip_nlam", "curated/rho_nlam",
})


def _key(*parts: str) -> str:
    """``parts`` joined by ``/``: a key of :data:`SCORE_KEYS`."""
    key = "/".join(parts)
    if key not in SCORE_KEYS:
        raise KeyError(f"{key!r} is not in SCORE_KEYS")
    return key


def influences(params, xtr, ytr, xte, yte, attend: bool, lams):
    """Influence vectors (one per ridge in ``lams``) and the KRR test predictions for the first."""
    ztr, zte = attention.transform(xtr, xte, attend=attend, normalize="row")
    K = two_layer.entk_W(params, ztr)
    Kx = two_layer.entk_W(params, zte, ztr)
    out = [scores.ntk_influence(K, Kx, ytr, yte, lam) for lam in lams]
    pred = scores.krr_predict(scores.krr_fit(K, ytr, lams[0]), Kx)
    return out, pred


def clean_point(K, Kx, ytr, lte, C: int, labels: dict[str, tuple[float, bool]], top_fraction: float):
    """The clean point of a map over radii and ridges, from the eNTK ``K`` ``(n, n)`` and ``Kx``
    ``(T, n)``, training targets ``ytr`` ``(n, C)`` and test labels ``lte`` ``(T,)``: at every ridge of
    ``labels`` (:func:`ntkbook.influence.scores.ridge_labels`), the influences
    ``influence_clean@<label>`` ``(n,)`` and the scalars ``clean/<label>/krr_test_acc``,
    ``frac_helpful`` (all points), ``frac_helpful_top`` (the top ``top_fraction`` by ``|I|``) and
    ``ceiling`` (:func:`ntkbook.influence.references.independence_ceiling`)."""
    arrays, sc = {}, {}
    yte = targets(lte, C)
    for label, lam in zip(labels, scores.ridge_values(labels, K.shape[0])):
        I0 = scores.ntk_influence(K, Kx, ytr, yte, lam)
        top = scores.top_indices(I0, top_fraction)
        arrays[f"influence_clean@{label}"] = I0
        sc[f"clean/{label}/krr_test_acc"] = accuracy(scores.krr_predict(scores.krr_fit(K, ytr, lam), Kx), lte, C)
        sc[f"clean/{label}/frac_helpful"] = float(np.mean(I0 > 0))
        sc[f"clean/{label}/frac_helpful_top"] = float(np.mean(I0[top] > 0))
        sc[f"clean/{label}/ceiling"] = references.independence_ceiling(I0, top=top)
    return arrays, sc


def perturbation_size(x, xa) -> dict[str, float]:
    """How far ``xa`` moved from ``x`` (both ``(n, d)``): ``linf``, the largest change of an entry,
    and ``l2_mean``, the mean L2 norm of a row's change."""
    delta = xa - x
    return {"linf": float(np.abs(delta).max()), "l2_mean": float(np.mean(np.linalg.norm(delta, axis=1)))}


def run_attack(name: str, params, x, y, attend: bool, C: int, eps: float, settings: EvalSettings,
               mask, key):
    """Attack ``name`` (``fgsm``, ``pgd``, ``mim`` or ``random``) of radius ``eps`` on the rows
    ``mask`` of the training set ``x``, maximising the frozen network's loss on it (steps from
    ``settings``, random start/signs from ``key``). Returns ``(x_attacked, measures)``: float64,
    inside the ball and the box exactly; the loss before and after, the largest pixel change and
    the mean L2 norm of a perturbed row."""
    loss = attack_loss(attend, C)
    p32 = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
    args = (p32, jnp.asarray(y, jnp.float32))
    x32 = jnp.asarray(x, jnp.float32)
    if name == "fgsm":
        xa = attacks.fgsm(loss, x32, eps, args=args, mask=mask)
    elif name == "pgd":
        xa = attacks.pgd(loss, x32, eps, args=args, mask=mask, steps=settings.pgd_steps,
                         step_size=settings.pgd_step_size, key=key)
    elif name == "mim":
        if settings.mim_steps is None or settings.mim_decay is None:
            raise InputError("MIM needs mim_steps and mim_decay in the settings")
        xa = attacks.mim(loss, x32, eps, args=args, mask=mask, steps=settings.mim_steps,
                         decay=settings.mim_decay)
    elif name == "random":
        xa = attacks.random_sign(x32, eps, key, mask=mask)
    else:
        raise InputError(f"unknown attack {name!r}")
    xa = np.asarray(xa, np.float64)
    # the float32 attack stays in the ball up to rounding; enforce it exactly in float64
    xa = np.clip(np.clip(xa, x - eps, x + eps), 0.0, 1.0)
    before = float(loss(x32, *args))
    after = float(loss(jnp.asarray(xa, jnp.float32), *args))
    delta = xa - x
    return xa, {"loss_before": before, "loss_after": after,
                "linf": float(np.abs(delta).max()),
                "l2_mean": float(np.mean(np.linalg.norm(delta[np.asarray(mask)], axis=1)))}


def evaluate(params, data, model: str, settings: EvalSettings, seed: int, *, do_ablation: bool):
    """Every intervention of ``settings`` on one trained network; ``data`` as
    :func:`ntkbook.influence.tasks.task_data` returns it, attack keys from ``1000 + seed``.
    Returns ``(arrays, scalars)``: the clean influences (and those after PGD on every point), and
    the scalars of :data:`SCORE_KEYS` (with the eps ablation when ``do_ablation``)."""
    xtr, ltr, xte, lte, C = data
    attend = model == "attn"
    ytr, yte = targets(ltr, C), targets(lte, C)
    n = xtr.shape[0]
    lams = (settings.lam, n * settings.lam)
    (I0, I0n), pred = influences(params, xtr, ytr, xte, yte, attend, lams)
    T = scores.top_indices(I0, settings.top_fraction)
    Tn = scores.top_indices(I0n, settings.top_fraction)
    maskT = np.zeros(n, bool)
    maskT[T] = True
    sc = {"krr_test_acc": accuracy(pred, lte, C), "top_size": int(T.size),
          "frac_helpful_top": float(np.mean(I0[T] > 0))}
    arrays = {"influence_clean": I0}
    key = jax.random.PRNGKey(1000 + seed)

    def record(inter, name, xa, extra):
        (Ia, Ian), _ = influences(params, xa, ytr, xte, yte, attend, lams)
        sc[_key(inter, name, "flip")] = scores.flip_rate(I0, Ia, top=T)
        sc[_key(inter, name, "rho")] = scores.spearman(I0, Ia)
        sc[_key(inter, name, "flip_nlam")] = scores.flip_rate(I0n, Ian, top=Tn)
        sc[_key(inter, name, "rho_nlam")] = scores.spearman(I0n, Ian)
        for k, v in extra.items():
            sc[_key(inter, name, k)] = v
        return Ia

    for name in settings.attacks:
        for inter in ("adversarial", "transformed"):
            if inter not in settings.interventions:
                continue
            mask = np.ones(n, bool) if inter == "adversarial" else maskT
            xa, extra = run_attack(name, params, xtr, ytr, attend, C, settings.eps, settings, mask,
                                   jax.random.fold_in(key, 10 * list(attacks.ATTACKS).index(name)
                                                      + (inter == "transformed")))
            Ia = record(inter, name, xa, extra)
            if inter == "adversarial" and name == "pgd":
                arrays["influence_pgd"] = Ia
    if "null" in settings.interventions:
        for inter in ("adversarial", "transformed"):
            mask = np.ones(n, bool) if inter == "adversarial" else maskT
            xa, extra = run_attack("random", params, xtr, ytr, attend, C, settings.eps, settings, mask,
                                   jax.random.fold_in(key, 7 if inter == "adversarial" else 8))
            record(f"null_{inter}", "random", xa, extra)
    if "curated" in settings.interventions:
        keep = np.setdiff1d(np.arange(n), T)
        (Ic, Icn), _ = influences(params, xtr[keep], ytr[keep], xte, yte, attend, lams)
        sc["curated/flip"] = scores.flip_rate(I0[keep], Ic, fraction=settings.top_fraction)
        sc["curated/rho"] = scores.spearman(I0[keep], Ic)
        sc["curated/flip_nlam"] = scores.flip_rate(I0n[keep], Icn, fraction=settings.top_fraction)
        sc["curated/rho_nlam"] = scores.spearman(I0n[keep], Icn)
    if do_ablation:
        for eps in settings.ablation_eps:
            for name in settings.attacks:
                xa, extra = run_attack(name, params, xtr, ytr, attend, C, eps, settings,
                                       np.ones(n, bool), jax.random.fold_in(key, int(eps * 1000)))
                (Ia,), _ = influences(params, xa, ytr, xte, yte, attend, lams[:1])
                sc[f"ablation/{name}/{eps:g}/flip"] = scores.flip_rate(I0, Ia, top=T)
                sc[f"ablation/{name}/{eps:g}/rho"] = scores.spearman(I0, Ia)
    return arrays, sc

"""The ``Config`` rules the influence experiments share, for their ``__post_init__``.

Each influence experiment (``influence_malleability``, ``influence_map``, ``influence_advtrain``,
``influence_cifar_route``, ``influence_width``, ``influence_recipe``, ``influence_sharpness``)
checks the same kinds of fields the same way: the tasks, models and attacks it runs, its seeds, its
balanced training and test sizes, the training recipe, the attack radii and the kernel ridges. These
helpers are those checks, written once, built on :mod:`ntkbook.validate` (each raises its
:class:`ntkbook.errors.ConfigError` naming the experiment and the field). Every helper runs its
checks in a fixed order, and the experiments call them in the order they check their fields: the
first failing check decides the message, so a helper must never reorder what it checks. The rules
special to one experiment stay in its own ``__post_init__``.

- :func:`check_choices`: tuple fields of known names (tasks, models, attacks, ...);
- :func:`check_subset`: a tuple field drawn from another field (tasks that are run, ...);
- :func:`check_seeds`: the seeds;
- :func:`check_balanced_sizes`: ``n_train`` and ``n_test``, multiples of the classes;
- :func:`check_fields`: fields whose rule is the same wherever they appear (:data:`RULES`);
- :func:`check_training`: the training recipe (width, epochs, lr, batch, l2);
- :func:`check_widths`: a sweep of widths;
- :func:`check_radius` and :func:`check_radii`: L-infinity radii;
- :func:`check_ridges`: the KRR ridges.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Iterable

from ntkbook import validate as v
from ntkbook.influence.tasks import task_classes

__all__ = ["eps_code", "RULES", "TRAINING", "check_choices", "check_subset", "check_seeds", "check_balanced_sizes",
           "check_fields", "check_training", "check_widths", "check_attn_steps", "check_radius",
           "check_radii", "check_ridges"]

#: why a width must be even
PAIRS_UNITS = "the symmetric initialisation pairs the units"
#: why a radius must lie in (0, 1]
RADIUS = "an L-infinity radius on pixels in [0, 1]"
#: why a ridge must be positive
POSITIVE_DEFINITE = "K + lam I must be positive definite"


def check_attn_steps(name: str, field: str, value: Any) -> None:
    """``value`` (MLP-Attn's full-batch steps) is an integer >= 1, or None (the mini-batch recipe)."""
    if value is not None:
        v.positive_int(name, field, value, "or None")


#: field -> its rule ``rule(name, field, value)``, the same in every influence experiment that has it
RULES: dict[str, Callable[[str, str, Any], None]] = {
    "width": functools.partial(v.even_positive_int, why=PAIRS_UNITS),
    "epochs": v.positive_int,
    "lr": v.finite_positive,
    "batch": v.positive_int,
    "l2": v.finite_non_negative,
    "attn_steps": check_attn_steps,
    "lam": functools.partial(v.finite_positive, why=POSITIVE_DEFINITE),
    "top_fraction": functools.partial(v.fraction, high_closed=True),
    "pgd_steps": v.positive_int,
    "pgd_step_size": v.finite_positive,
    "pgd_step_fraction": v.finite_positive,
    "pgd_restarts": v.positive_int,
    "mim_steps": v.positive_int,
    "mim_decay": v.finite_non_negative,
    "null_draws": v.positive_int,
    "hessian_steps": v.positive_int,
}

#: the fields of the training recipe, in the order :func:`check_training` checks them
TRAINING = ("width", "epochs", "lr", "batch", "l2")


def check_choices(name: str, cfg: Any, /, **known: Iterable) -> None:
    """For each ``field=choices`` in the order given: ``cfg.<field>`` is a non-empty tuple of
    ``choices`` with no repeats (e.g. ``tasks=TASKS, models=MODELS``)."""
    for field, choices in known.items():
        values = getattr(cfg, field)
        v.non_empty(name, field, values)
        v.all_in(name, field, values, choices)
        v.unique(name, field, values)


def check_subset(name: str, field: str, values: tuple, of: Iterable, why: str) -> None:
    """``values`` are drawn from ``of`` (another field's values; ``why`` says which, e.g. "tasks
    that are run"), with no repeats; empty is allowed."""
    v.all_in(name, field, values, of, why)
    v.unique(name, field, values)


def check_seeds(name: str, seeds: Any) -> None:
    """``seeds``: a non-empty tuple of distinct integers >= 0 (JAX seeds)."""
    v.non_empty(name, "seeds", seeds)
    v.each(v.int_at_least, name, "seeds", seeds, 0, "a JAX seed")
    v.unique(name, "seeds", seeds)


def check_balanced_sizes(name: str, cfg: Any, tasks: Iterable[str], fields: tuple[str, ...] = ("n_train", "n_test"),
                         classes_of: str = "every task's classes") -> None:
    """Each of ``fields`` (in order) is an integer >= 1 and a multiple of the classes of every one
    of ``tasks`` (their least common multiple): a balanced subset of ``classes_of``. ``tasks`` must
    be known tasks (checked before)."""
    classes = math.lcm(*(len(task_classes(t)[1]) for t in tasks))
    for field in fields:
        n = getattr(cfg, field)
        v.positive_int(name, field, n)
        v.require(name, field, n, n % classes == 0, f"a multiple of {classes}", f"a balanced subset of {classes_of}")


def check_fields(name: str, cfg: Any, *fields: str) -> None:
    """``cfg.<field>`` for each of ``fields`` in order, by its shared rule in :data:`RULES`."""
    for field in fields:
        RULES[field](name, field, getattr(cfg, field))


def check_training(name: str, cfg: Any) -> None:
    """The training recipe: the fields :data:`TRAINING` (width even, epochs and batch >= 1, lr > 0,
    l2 >= 0), in that order."""
    check_fields(name, cfg, *TRAINING)


def check_widths(name: str, widths: Any) -> None:
    """``widths``: a non-empty, strictly increasing tuple of even widths (the rule of ``width``)."""
    v.non_empty(name, "widths", widths)
    v.each(v.even_positive_int, name, "widths", widths, PAIRS_UNITS)
    v.increasing(name, "widths", widths)


def eps_code(eps: float) -> int:
    """The radius ``eps`` in units of 1e-4: what keys its random draws (independent of the other
    radii of a sweep; :func:`check_radii` asks that the codes of a sweep's radii differ)."""
    return int(round(eps * 1e4))


def check_radius(name: str, field: str, value: Any) -> None:
    """``value`` is an L-infinity radius on pixels in [0, 1]: a number in (0, 1]."""
    v.fraction(name, field, value, RADIUS, high_closed=True)


def check_radii(name: str, field: str, values: Any, code: Callable[[float], int], *, required: bool = True) -> None:
    """``values``: a tuple (non-empty if ``required``, checked first) of radii (:func:`check_radius`),
    strictly increasing, whose keys ``code(eps)`` (what keys each radius's random draws) differ."""
    if required:
        v.non_empty(name, field, values)
    v.each(check_radius, name, field, values)
    v.increasing(name, field, values)
    v.require(name, field, values, len({code(e) for e in values}) == len(values),
              "radii that differ in their first four decimals", "each radius keys its own draws")


def check_ridges(name: str, cfg: Any, fields: tuple[str, ...]) -> None:
    """Each of ``fields`` (tuples of KRR ridges) holds distinct numbers > 0; then ``ridges`` and
    ``ridges_per_point`` (both among ``fields``, checked in them) are not both empty."""
    for field in fields:
        v.each(v.finite_positive, name, field, getattr(cfg, field), POSITIVE_DEFINITE)
        v.unique(name, field, getattr(cfg, field))
    v.require(name, "ridges", cfg.ridges, bool(cfg.ridges or cfg.ridges_per_point),
              "non-empty when ridges_per_point is empty", "the influence needs a ridge")

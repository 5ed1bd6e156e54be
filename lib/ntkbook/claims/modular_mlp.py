"""Which stored runs of the modular MLP the book reads beyond the paper preset.

The experiment's own :func:`ntkbook.experiments.modular_mlp.variants` (frozen: stored results keep
its code hash) runs the larger prime, p = 59, through the generic engine. On 2 CPU cores each of
that run's six engine kernels takes over half an hour (the first one had not finished after 31
minutes), so at paper scale the book reads the larger prime with ``kernel="closed_form"``: the
model's exact kernel formula, which gives the same kernels as the engine to round-off (the paper
preset's cross-check, ``crosscheck["engine_vs_closed_form_max_rel"]`` < 1e-12, and the tests), in
minutes. The question the run answers (do the cliffs and their features scale with p?) does not
depend on how the kernel is formed.
"""

from __future__ import annotations

from typing import Any

from ntkbook.experiments import modular_mlp

__all__ = ["variants"]


def variants(scale: str) -> dict[str, dict[str, Any]]:
    """The overrides of the runs beyond the paper that the book reads (label -> overrides):
    :func:`ntkbook.experiments.modular_mlp.variants`, with the larger prime's kernels from the
    closed form at paper scale (module docstring)."""
    out = {label: dict(over) for label, over in modular_mlp.variants(scale).items()}
    if scale == "paper":
        out["larger_p"]["kernel"] = "closed_form"
    return out

"""Adversarial training (``influence_advtrain``) through the shared training loop."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ntkbook.influence import training
from ntkbook.influence.losses import context_loss
from ntkbook.influence.tasks import task_data, targets


def test_adversarial_training_is_deterministic_and_its_loss_is_the_attacked_one(data_dir):
    recipe = training.TrainRecipe(width=16, epochs=4, batch=16, lr=1e-2, l2=0.0)
    pgd = {"eps": 0.3, "pgd_steps": 3, "pgd_step_size": 0.15}  # the smoke preset's
    xtr, ltr, xte, lte, C = task_data("mnist_3v8", 40, 40)
    y = targets(ltr, C)
    p1, h1 = training.adversarial_train(xtr, y, C, False, recipe, seed=0, **pgd)
    p2, h2 = training.adversarial_train(xtr, y, C, False, recipe, seed=0, **pgd)
    np.testing.assert_array_equal(np.asarray(p1["W"]), np.asarray(p2["W"]))
    assert list(h1["epoch"]) == [1, 2, 3, 4] and np.all(np.isfinite(h1["adv_loss"]))
    # the loss it trains on is that of attacked points: above the clean loss at the final weights
    loss = context_loss(False, C)
    x = jnp.asarray(xtr, jnp.float32)
    clean = float(loss(x, p1, jnp.asarray(y, jnp.float32), x))
    assert h1["adv_loss"][-1] > clean

"""Adversarial training (``influence_advtrain``) through the shared training loop."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ntkbook.experiments import influence_advtrain as ADV
from ntkbook.experiments import influence_malleability as IM


def test_adversarial_training_is_deterministic_and_its_loss_is_the_attacked_one(data_dir):
    cfg = dataclasses.replace(ADV.Config.smoke(), n_train=40, n_test=40, width=16, epochs=4, batch=16)
    xtr, ltr, xte, lte, C = IM.task_data("mnist_3v8", cfg.n_train, cfg.n_test)
    y = IM.targets(ltr, C)
    p1, h1 = ADV.adversarial_train(xtr, y, C, False, cfg, seed=0)
    p2, h2 = ADV.adversarial_train(xtr, y, C, False, cfg, seed=0)
    np.testing.assert_array_equal(np.asarray(p1["W"]), np.asarray(p2["W"]))
    assert list(h1["epoch"]) == [1, 2, 3, 4] and np.all(np.isfinite(h1["adv_loss"]))
    # the loss it trains on is that of attacked points: above the clean loss at the final weights
    loss = ADV.batch_loss(False, C)
    x = jnp.asarray(xtr, jnp.float32)
    clean = float(loss(x, p1, jnp.asarray(y, jnp.float32), x))
    assert h1["adv_loss"][-1] > clean

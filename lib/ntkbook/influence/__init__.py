"""Kernel influence and how far perturbations of the training set move it (Paper A).

The tools:

- :mod:`ntkbook.influence.scores`         kernel ridge regression, exact leave-one-out influence, flip rate
- :mod:`ntkbook.influence.attacks`        FGSM, PGD, MIM and random signs inside an L-infinity ball
- :mod:`ntkbook.influence.landscape`      filter-normalised loss slices and the top Hessian eigenvalue

The protocol every influence experiment follows:

- :mod:`ntkbook.influence.tasks`          data sets and classes, targets, accuracy
- :mod:`ntkbook.influence.losses`         the training loss and the losses the attacks maximise
- :mod:`ntkbook.influence.training`       the training recipes (standard, PGD adversarial)
- :mod:`ntkbook.influence.interventions`  influence of a trained network, attacks, flip rates
- :mod:`ntkbook.influence.readout`        reading the stored results (per-seed scalars, flip ratios)
- :mod:`ntkbook.influence.config_checks`  the Config rules the influence experiments share
"""

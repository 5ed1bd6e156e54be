"""Kernel influence and how far perturbations of the training set move it (Paper A).

- :mod:`ntkbook.influence.scores`     kernel ridge regression, exact leave-one-out influence, flip rate
- :mod:`ntkbook.influence.attacks`    FGSM, PGD, MIM and random signs inside an L-infinity ball
- :mod:`ntkbook.influence.landscape`  filter-normalised loss slices and the top Hessian eigenvalue
"""

"""How far a trained finite-width network is from the kernel (lazy) regime.

:mod:`ntkbook.lazy.distance`: the set-up, the exact NTK predictor, the Adam recipe on the network
and on its own linearisation, the input geometry and the width-trend rule that the two distance
experiments (``ntk_distance``, ``ntk_distance_fullbatch``) share.
"""

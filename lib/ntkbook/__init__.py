"""ntkbook: the library behind the executable book on the NTK beyond the lazy regime.

Packages by concern, on floors; every import goes down (``tests/test_layout.py`` checks it):

====== ===================================================================================
floor  rooms
====== ===================================================================================
7      :mod:`ntkbook.__main__`: ``python -m ntkbook run | list | verify | rehash``
6      :mod:`ntkbook.book` (build, scorecard, chapter helpers, browser check),
       :mod:`ntkbook.plotting` (figures from results)
5      :mod:`ntkbook.experiments`: one thin module per experiment (``Config`` + ``run``)
4      :mod:`ntkbook.gemma` (Gemma-3-270M, its layer operator, the POS data, probes),
       :mod:`ntkbook.influence` (kernel influence, attacks, loss landscape, the shared protocol),
       :mod:`ntkbook.lazy` (how far a trained network is from its kernel regime)
3      :mod:`ntkbook.models`: small models as pure functions over pytrees (the two-layer ReLU
       network, linear attention, the modular MLP, the one-layer transformer)
2      :mod:`ntkbook.ntk`: the engine (eNTK, Lanczos, analytic kernels, Gram spectra, features)
1      :mod:`ntkbook.store` (results), :mod:`ntkbook.data` (data sets), :mod:`ntkbook.train`
       (the training loop), :mod:`ntkbook.stats` (mean ± spread, slopes), :mod:`ntkbook.verdicts`
0      :mod:`ntkbook.paths`, :mod:`ntkbook.progress`, :mod:`ntkbook.numbers`,
       :mod:`ntkbook.codehash`
====== ===================================================================================
"""

__version__ = "0.1.0"

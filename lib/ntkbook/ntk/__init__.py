"""The engine: it knows neither paper.

- :mod:`ntkbook.ntk.entk`      the empirical NTK, materialised (per layer, reductions) and matrix-free;
  each parameter leaf by its per-example Jacobians or by structured derivatives (``route=``)
- :mod:`ntkbook.ntk.structured` structured derivatives: a dense layer's part of the kernel as the product
  of two small Gram matrices, found automatically in the model's jaxpr
- :mod:`ntkbook.ntk.eig`       Lanczos and dense top-k eigenpairs of symmetric operators
- :mod:`ntkbook.ntk.kernels`   analytic infinite-width kernels of the two-layer ReLU network
- :mod:`ntkbook.ntk.gram`      spectra and condition numbers of Gram matrices
- :mod:`ntkbook.ntk.features`  Fourier features, subspace overlaps, chance levels, spectral cliffs
"""

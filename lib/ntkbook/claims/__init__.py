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

from ntkbook.verdicts import VERDICTS

__all__ = ["NOT_TESTED", "ROW_VERDICTS"]

#: a claim whose measurement exists but tested nothing: the model it is about did not train, or a
#: result it needs is not stored. Not a verdict on the claim (a claim "not tested" neither
#: reproduces nor fails), so it is not among :data:`ntkbook.verdicts.VERDICTS`.
NOT_TESTED = "not tested"

#: what a scorecard row may say: a verdict, or that nothing was tested
ROW_VERDICTS = (*VERDICTS, NOT_TESTED)

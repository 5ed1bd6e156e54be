"""What the stored results say: summaries with their intervals, and the scorecard's verdict rules.

A module here reads stored results (:class:`ntkbook.store.Result`) and computes nothing an
experiment stores. No experiment's ``run`` reaches this package, so a summary or a verdict rule can
change without changing any experiment's code hash: a stored result stays "today's code" while
the reading of it improves. Experiment modules hold what computes results; their verdict rules
are here, each in the module of its chapter or of its experiment (e.g.
:func:`ntkbook.claims.lanczos.lanczos_ghosts_scorecard`, formerly
``ntkbook.experiments.lanczos_ghosts.scorecard``). Where an experiment module still carries an
older ``scorecard(result)``, the module here that judges its claims names it in ``SUPERSEDES``.

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

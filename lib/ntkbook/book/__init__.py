"""The book's tooling: it sits above the experiments and reads their results.

- :mod:`ntkbook.book.build`      execute chapters (papermill) and render the book (jupyter-book)
- :mod:`ntkbook.book.report`     what chapters show under their title: provenance, the Run box
- :mod:`ntkbook.book.scorecard`  every claim of both papers with the paper's number, ours, a verdict
- :mod:`ntkbook.book.htmlcheck`  the headless-Chromium check of the built HTML
"""

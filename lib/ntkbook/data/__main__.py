"""``python -m ntkbook.data fetch|list``: the book's data files (see :mod:`ntkbook.data.fetch`)."""

import sys

from ntkbook.data.fetch import main

sys.exit(main())

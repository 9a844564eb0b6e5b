"""``python -m cbs``: the ``cbs`` command."""

import sys

from cbs import main

sys.exit(main())

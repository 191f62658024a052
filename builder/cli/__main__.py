"""``python -m builder.cli``: the same as the ``tritonforge`` command."""

import sys

from builder.cli import main

sys.exit(main())

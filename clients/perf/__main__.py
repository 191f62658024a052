import sys

from clients.perf.cli import main

sys.exit(main())

import sys

from builder.openai_frontend.server import main

sys.exit(main())

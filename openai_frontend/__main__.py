import sys

from openai_frontend.server import main

sys.exit(main())

import sys

from dynagent.cli import main

sys.exit(main())

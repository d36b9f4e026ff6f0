"""``python -m bench``: the runtime overhead benchmark (see ``bench.overhead``)."""

import sys

from bench.overhead import main

sys.exit(main())

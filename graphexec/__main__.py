"""``python -m graphexec``: the ``graphexec`` command line."""

import sys

from graphexec.cli import main

sys.exit(main())

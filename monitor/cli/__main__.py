"""``python -m monitor.cli``: the same entry point as the ``fleetmon`` script."""

import sys

from monitor.cli.main import main

sys.exit(main())

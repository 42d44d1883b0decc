"""``python -m fairlane.cli``."""

import sys

from fairlane.cli.main import main

sys.exit(main())

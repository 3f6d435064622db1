"""`python -m nicsim`: the nicsim command."""

import sys

from nicsim.cli import main

sys.exit(main())

"""`python -m kubecua_trainer ...`: see cli.py."""

import sys

from kubecua_trainer.cli import main

sys.exit(main())

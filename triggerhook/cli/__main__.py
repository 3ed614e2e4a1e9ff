import sys

from triggerhook.cli import main

sys.exit(main())

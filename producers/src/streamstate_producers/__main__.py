"""``python -m streamstate_producers``: the producer CLI; with no sub-command, the demo mode."""

import sys

from streamstate_producers.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m streamstate.producers``: the producer CLI; with no sub-command, the demo mode."""

import sys

from streamstate.producers.cli import main

if __name__ == "__main__":
    sys.exit(main())

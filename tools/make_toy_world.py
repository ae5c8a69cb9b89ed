#!/usr/bin/env python
"""``uvlp-make-toy-world`` run from a checkout: see ``mmf_uvlp/cli/make_toy_world.py``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's mmf_uvlp

from mmf_uvlp.cli.make_toy_world import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""``uvlp-make-toy-world``, as the study's archived commands spell it (``python tools/make_toy_world.py``):
see ``mmf_uvlp/cli/make_toy_world.py`` and tools/README.md."""

import sys

from mmf_uvlp.cli.make_toy_world import main

if __name__ == "__main__":
    sys.exit(main())

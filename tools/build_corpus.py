#!/usr/bin/env python
"""``uvlp-build-corpus``, as the study's archived commands spell it (``python tools/build_corpus.py``):
see ``mmf_uvlp/cli/build_corpus.py`` and tools/README.md."""

import sys

from mmf_uvlp.cli.build_corpus import main

if __name__ == "__main__":
    sys.exit(main())

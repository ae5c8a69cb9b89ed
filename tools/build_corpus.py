#!/usr/bin/env python
"""``uvlp-build-corpus`` run from a checkout: see ``mmf_uvlp/cli/build_corpus.py``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's mmf_uvlp

from mmf_uvlp.cli.build_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

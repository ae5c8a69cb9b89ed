#!/usr/bin/env python
"""``uvlp-convert-nlvr2`` run from a checkout: see ``mmf_uvlp/cli/convert_nlvr2.py``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's mmf_uvlp

from mmf_uvlp.cli.convert_nlvr2 import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

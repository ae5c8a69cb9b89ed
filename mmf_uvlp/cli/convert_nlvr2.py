"""NLVR2 as lil-lab ships it (train.json, dev.json, test1.json) into the files MMF reads.

    convert_nlvr2.py nlvr/nlvr2/data/train.json nlvr/nlvr2/data/dev.json \\
        nlvr/nlvr2/data/test1.json --out data/mmf/nlvr2/annotations \\
        [--features data/features/nlvr2.lmdb]

lil-lab's files hold one json object a line under a ``.json`` name, which MMF reads as one
json document (``JSONDecodeError: Extra data``). This writes ``train.jsonl``, ``dev.jsonl``
and ``test1.jsonl`` (the names MMF's nlvr2 config expects) after checking every record;
with ``--features`` both images of every pair must be in that LMDB or ``.npy`` folder.
"""

from __future__ import annotations

import argparse
import sys

from mmf_uvlp.data_formats.nlvr2_files import convert_nlvr2
from mmf_uvlp.errors import FormatError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]),
    )
    parser.add_argument("sources", nargs="+", help="lil-lab's NLVR2 .json files")
    parser.add_argument("--out", required=True, help="folder for the .jsonl files")
    parser.add_argument(
        "--features",
        help="MMF feature LMDB (*.lmdb) or .npy folder that must hold both images of every pair",
    )
    args = parser.parse_args(argv)
    try:
        counts = convert_nlvr2(args.sources, args.out, args.features)
    except (FormatError, ValueError, OSError) as e:
        print(f"convert_nlvr2: error: {e}", file=sys.stderr)
        return 2
    for path, tally in counts.items():
        print(f"{path}: {tally['records']} records ({tally['True']} True, {tally['False']} False)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

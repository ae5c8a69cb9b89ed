"""``python -m mmf_uvlp``: the front door (:mod:`mmf_uvlp.cli.overview`)."""

from mmf_uvlp.cli.overview import main

if __name__ == "__main__":
    raise SystemExit(main())

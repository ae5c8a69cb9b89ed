"""The worked example of docs/own-data.md (tests/fixtures/own_data) for the tests."""

import importlib.util

from helpers import REPO


EXAMPLE = REPO / "tests" / "fixtures" / "own_data"


def hand_written():
    """The example's hand-written detections: the literals its detector files encode."""
    spec = importlib.util.spec_from_file_location(
        "own_data_detections", EXAMPLE / "encode_detector_output.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

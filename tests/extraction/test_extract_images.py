"""The extractor's inputs without a detector: the three listings and what decoding refuses."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from mmf_uvlp.extraction.images import BadImage, decode, list_images, read_bytes


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def test_a_tsv_a_list_file_and_a_folder_list_the_same_keys(tmp_path):
    photo = Image.fromarray(np.full((40, 50, 3), 7, dtype=np.uint8))
    (tmp_path / "images").mkdir()
    for key in ("b", "a"):
        photo.save(tmp_path / "images" / f"{key}.png")
    (tmp_path / "list.txt").write_text("# two images\nimages/b.png\n\nimages/a.png\n")
    rows = [f"{key}\t{base64.b64encode(_png(photo)).decode()}\n" for key in ("b", "a")]
    (tmp_path / "images.tsv").write_text("".join(rows) + "c\tnot base64!\n")
    folder, listed, tsv = (
        list_images(str(tmp_path / name)) for name in ("images", "list.txt", "images.tsv")
    )
    assert [r.key for r in folder.images] == ["a", "b"]  # sorted paths
    assert [r.key for r in listed.images] == ["b", "a"]  # the list's order
    assert [r.key for r in tsv.images] == ["b", "a", "c"]
    array, conversions = decode(read_bytes(tsv.images[1], tsv.tsv))
    assert array.shape == (40, 50, 3) and array.dtype == np.uint8 and conversions == []
    with pytest.raises(BadImage) as bad:
        read_bytes(tsv.images[2], tsv.tsv)
    assert bad.value.kind == "corrupt" and "base64" in str(bad.value)


def test_an_image_over_pil_s_own_limit_is_huge_not_a_crash():
    with pytest.raises(BadImage) as bad:
        decode(_png(Image.new("1", (14000, 14000))))  # 196 MP: PIL refuses to open it
    assert bad.value.kind == "huge"


def test_a_missing_input_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such"):
        list_images(str(tmp_path / "no-such"))

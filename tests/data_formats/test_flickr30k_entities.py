"""The Flickr30K Entities reader on crafted files, and the toy world's annotations read back."""

import json
import re
import textwrap
from pathlib import Path

import pytest

from mmf_uvlp.errors import FormatError
from mmf_uvlp.data_formats.flickr30k_entities import (
    Flickr30kEntities,
    parse_sentence,
    read_annotation,
    read_sentences,
)
from mmf_uvlp.toy_world.entities import GROUP_NOUNS
from mmf_uvlp.toy_world.vocabulary import CLASS_INDEX, CLASSES, NUMBER_WORDS, plural

XML = """\
<annotation>
  <filename>100.jpg</filename>
  <size>
    <width>500</width>
    <height>300</height>
    <depth>3</depth>
  </size>
  <object>
    <name>1</name>
    <bndbox><xmin>11</xmin><ymin>21</ymin><xmax>110</xmax><ymax>220</ymax></bndbox>
  </object>
  <object>
    <name>2</name>
    <name>4</name>
    <bndbox><xmin>201</xmin><ymin>1</ymin><xmax>250</xmax><ymax>50</ymax></bndbox>
  </object>
  <object>
    <name>2</name>
    <bndbox><xmin>301</xmin><ymin>101</ymin><xmax>500</xmax><ymax>300</ymax></bndbox>
  </object>
  <object>
    <name>3</name>
    <nobndbox>0</nobndbox>
    <scene>1</scene>
  </object>
  <object>
    <name>5</name>
    <nobndbox>1</nobndbox>
    <scene>0</scene>
  </object>
</annotation>
"""

SENTENCES = (
    "[/EN#1/people A man] with [/EN#4/clothing/other a hat] walks [/EN#2/animals two dogs] "
    "on [/EN#3/scene the beach] .\n"
    "\n"
    "[/EN#1/people A man with [/EN#4/clothing a hat]] and [/EN#5/notvisual his friends] .\n"
)


def _root(tmp_path: Path, sentences: str = SENTENCES, xml: str = XML) -> Path:
    root = tmp_path / "entities"
    (root / "Sentences").mkdir(parents=True)
    (root / "Annotations").mkdir()
    (root / "Sentences" / "100.txt").write_text(sentences, encoding="utf-8")
    (root / "Annotations" / "100.xml").write_text(xml, encoding="utf-8")
    (root / "val.txt").write_text("100\n", encoding="utf-8")
    return root


def test_sentences_with_nested_and_multi_type_phrases(tmp_path):
    first, second = read_sentences(_root(tmp_path) / "Sentences" / "100.txt")
    assert first.line == 1 and second.line == 3  # the blank line is skipped, lines kept
    assert first.text == "A man with a hat walks two dogs on the beach ."
    assert [(p.entity_id, p.types, p.first_word, p.text) for p in first.phrases] == [
        ("1", ("people",), 0, "A man"),
        ("4", ("clothing", "other"), 3, "a hat"),
        ("2", ("animals",), 6, "two dogs"),
        ("3", ("scene",), 9, "the beach"),
    ]
    # nested: the outer phrase holds the inner one; phrases keep their opening order
    assert [(p.entity_id, p.first_word, p.end_word) for p in second.phrases] == [
        ("1", 0, 5),
        ("4", 3, 5),
        ("5", 6, 8),
    ]
    assert second.words[4] == "hat"


def test_annotation_boxes_multi_box_shared_box_scene_and_no_box(tmp_path):
    annotation = read_annotation(_root(tmp_path) / "Annotations" / "100.xml")
    assert (annotation.filename, annotation.width, annotation.height, annotation.depth) == (
        "100.jpg",
        500,
        300,
        3,
    )
    # 1-based inclusive pixels -> continuous [x1, y1, x2, y2]
    assert annotation.boxes["1"] == ((10.0, 20.0, 110.0, 220.0),)
    assert annotation.boxes["2"] == ((200.0, 0.0, 250.0, 50.0), (300.0, 100.0, 500.0, 300.0))
    assert annotation.boxes["4"] == ((200.0, 0.0, 250.0, 50.0),)  # a box with two names
    assert annotation.scene == {"3"} and annotation.nobox == {"5"}
    assert "3" not in annotation.boxes and "5" not in annotation.boxes


def test_dataset_streams_images_of_a_split(tmp_path):
    dataset = Flickr30kEntities(_root(tmp_path))
    assert dataset.image_ids("val") == ["100"] and dataset.image_ids() == ["100"]
    (image,) = dataset.images("val")
    assert image.gold_boxes("2") == image.annotation.boxes["2"]
    assert image.gold_boxes("3") == () and image.gold_boxes("5") == ()
    with pytest.raises(FileNotFoundError, match="test.txt"):
        dataset.image_ids("test")


@pytest.mark.parametrize(
    "line, field",
    [
        ("[/EN#1/people A man .", "1 unclosed"),  # never closed
        ("A man] walks .", "at most 0 closing"),  # closes nothing
        ("[/EN#x/people A man] .", "opening"),  # id not digits
        ("[/EN#1 A man] .", "opening"),  # no type
        ("[/EN#1/people ] walks .", "at least one word"),  # empty phrase
        ("[/EN#1/people A m[an]] .", "brackets only as markup"),  # bracket inside a word
    ],
)
def test_bad_markup_names_file_and_line(tmp_path, line, field):
    path = tmp_path / "bad.txt"
    path.write_text("[/EN#1/people A man] .\n" + line + "\n", encoding="utf-8")
    with pytest.raises(FormatError) as error:
        list(read_sentences(path))
    message = str(error.value)
    assert f"{path}:2:" in message and field in message


def test_bad_utf8_names_the_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"[/EN#1/people A man] .\nA caf\xe9 .\n")
    with pytest.raises(FormatError, match=re.escape(f"{path}:2:") + ".*UTF-8"):
        list(read_sentences(path))


def _replace(old: str, new: str) -> str:
    assert old in XML
    return XML.replace(old, new, 1)


@pytest.mark.parametrize(
    "xml, line, expected",
    [
        (_replace("</size>", "</sizes>"), 7, "well-formed xml"),
        (_replace("<xmax>110</xmax>", ""), 10, "exactly one <xmax>"),
        (_replace("<xmax>110</xmax>", "<xmax>501</xmax>"), 10, "integer in [1, 500]"),
        (_replace("<ymin>21</ymin>", "<ymin>two</ymin>"), 10, "integer in [1, 300]"),
        (_replace("<xmin>11</xmin>", "<xmin>200</xmin>"), 10, "xmin <= xmax"),
        (_replace("<name>1</name>", "<name>one</name>"), 8, "entity ids"),
        (_replace("<nobndbox>1</nobndbox>\n    <scene>0</scene>", ""), 26, "<bndbox>, or"),
        (_replace("<width>500</width>", ""), 3, "exactly one <width>"),
        (XML.replace("annotation>", "notes>"), 1, "<annotation>"),
    ],
)
def test_bad_xml_names_file_and_line(tmp_path, xml, line, expected):
    path = tmp_path / "100.xml"
    path.write_text(xml, encoding="utf-8")
    with pytest.raises(FormatError) as error:
        read_annotation(path)
    assert str(error.value).startswith(f"{path}:{line}:"), str(error.value)
    assert expected in str(error.value)


def test_bad_split_list_names_the_line(tmp_path):
    root = _root(tmp_path)
    (root / "val.txt").write_text("100\n\n10x1\n", encoding="utf-8")
    with pytest.raises(FormatError, match=re.escape(f"{root / 'val.txt'}:3:")):
        Flickr30kEntities(root).image_ids("val")


def test_missing_folders_are_reported(tmp_path):
    with pytest.raises(FileNotFoundError, match="Annotations"):
        (tmp_path / "Sentences").mkdir()
        Flickr30kEntities(tmp_path)


def test_parse_sentence_keeps_words_outside_phrases():
    sentence = parse_sentence("Two [/EN#7/people men] talk .", "x.txt", 4)
    assert sentence.words == ("Two", "men", "talk", ".") and sentence.line == 4
    assert sentence.phrases[0].first_word == 1


# ---------------------------------------------------------------- the toy world's files


def _scenes(world: Path) -> dict:
    with open(world / "images_gt" / "flickr30k.jsonl", encoding="utf-8") as f:
        return {s["image_id"]: s for s in map(json.loads, f)}


def test_toy_world_annotations_round_trip(tiny_world):
    manifest = json.loads((tiny_world / "world.json").read_text())
    paths = manifest["paths"]["flickr30k_entities"]
    dataset = Flickr30kEntities(tiny_world / paths["root"])
    scenes = _scenes(tiny_world)
    assert dataset.image_ids() == sorted(scenes)

    phrases = multi_box = 0
    for image in dataset.images():
        scene = scenes[image.image_id]
        size = (image.annotation.width, image.annotation.height)
        assert size == (scene["width"], scene["height"])
        assert len(image.sentences) == 5
        entity_words = {}
        for sentence in image.sentences:
            for phrase in sentence.phrases:
                phrases += 1
                boxes = image.gold_boxes(phrase.entity_id)
                first = phrase.words[0]
                count = NUMBER_WORDS.index(first) if first in NUMBER_WORDS else 1
                assert len(boxes) == count, phrase
                multi_box += count > 1
                for box in boxes:  # each box is a named object's gold box, rounded to pixels
                    named = [
                        o
                        for o in scene["objects"]
                        if all(abs(a - round(b)) <= 1e-6 for a, b in zip(box, o["box"]))
                    ]
                    assert named, (phrase, box)
                    nouns = {CLASSES[CLASS_INDEX[o["class"]]].supercategory: o for o in named}
                    assert any(
                        o["class"] in phrase.text or plural(o["class"]) in phrase.text
                        for o in named
                    ) or any(GROUP_NOUNS.get(s, "-") in phrase.text for s in nouns), (phrase, named)
                # an entity id names the same objects in every caption of the image
                entity_words.setdefault(phrase.entity_id, set()).add(boxes)
        assert all(len(v) == 1 for v in entity_words.values())
    assert phrases > 100 and multi_box > 0

    for split, name in (("train", "train"), ("val", "dev"), ("test", "test")):
        ve = tiny_world / f"mmf/visual_entailment/annotations/snli_ve_{name}.jsonl"
        with open(ve, encoding="utf-8") as f:
            images = {json.loads(line)["Flikr30kID"].split(".")[0] for line in f}
        assert dataset.image_ids(split) == sorted(images)


def test_toy_world_sentences_are_valid_markup(tiny_world):
    text = (tiny_world / "flickr30k_entities/Sentences").glob("*.txt")
    first = sorted(text)[0].read_text(encoding="utf-8").splitlines()[0]
    assert re.search(r"\[/EN#\d+/(people|animals|vehicles|clothing|scene|other) ", first)
    assert first.endswith(" .")
    xml = sorted((tiny_world / "flickr30k_entities/Annotations").glob("*.xml"))[0]
    assert textwrap.dedent(xml.read_text()).startswith("<annotation>\n\t<filename>")

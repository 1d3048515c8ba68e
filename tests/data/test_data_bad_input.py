"""Bad input to the data readers: each case is a located error (file and line or field), never
a traceback from deeper down, a silently wrong result or a hang. Tiny fixtures written here."""

from __future__ import annotations

import io
import json
import lzma
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from treeqa.data.dependency import from_record
from treeqa.data.tree import TreeSyntaxError, parse_tree
from treeqa.data.vectors import VectorFileError, load_vectors

# --- bracketed trees -----------------------------------------------------------------------


@pytest.mark.parametrize("label", ["²", "٣", "４"])  # str.isdigit() holds for each
def test_a_label_that_is_not_an_ascii_digit_is_a_located_error(label: str) -> None:
    with pytest.raises(TreeSyntaxError, match=rf"^t\.txt:1:2: label '{label}' is not an integer"):
        parse_tree(f"({label} (2 a) (4 good))", "t.txt")


def test_an_empty_dependency_token_is_an_error_like_an_empty_leaf() -> None:
    record = {
        "tokens": ["Not", "", "."],
        "tags": ["RB", "JJ", "."],
        "heads": [1, -1, 1],
        "rels": ["neg", "ROOT", "punct"],
        "labels": [2, 3, -1],
    }
    with pytest.raises(TreeSyntaxError, match=r"^d\.jsonl:4:1: field 'tokens': token 1 is empty"):
        from_record(record, "d.jsonl", 4)


# --- word vectors --------------------------------------------------------------------------


def vectors(tmp_path: Path, path: Path, keys: list[str | None]) -> Any:
    return load_vectors(path, keys, cache_dir=tmp_path / "cache")


def test_a_byte_order_mark_does_not_hide_the_first_glove_word(tmp_path: Path) -> None:
    path = tmp_path / "v.txt"
    path.write_bytes(b"\xef\xbb\xbfthe 1 2\nand 3 4\n")
    v = vectors(tmp_path, path, ["the", "and"])
    assert v.found.all()
    np.testing.assert_array_equal(v.matrix, [[1, 2], [3, 4]])


def spacy_pair(tmp_path: Path, table: np.ndarray, key2row: bytes) -> Path:
    buffer = io.BytesIO()
    np.save(buffer, table)
    (tmp_path / "md.vectors.npy.xz").write_bytes(lzma.compress(buffer.getvalue()))
    (tmp_path / "md.key2row.tsv").write_bytes(key2row)
    return tmp_path / "md.vectors.npy.xz"


def test_a_byte_order_mark_does_not_hide_the_first_spacy_key(tmp_path: Path) -> None:
    table = np.arange(6, dtype=np.float32).reshape(3, 2)
    path = spacy_pair(tmp_path, table, b"\xef\xbb\xbfthe\t2\nand\t0\n")
    v = vectors(tmp_path, path, ["the", "and"])
    assert v.found.all()
    np.testing.assert_array_equal(v.matrix, table[[2, 0]])


def test_a_wanted_spacy_row_with_nan_is_an_error_naming_row_and_word(tmp_path: Path) -> None:
    table = np.array([[0.5, 1.0], [np.nan, 2.0], [3.0, 4.0]], dtype=np.float32)
    path = spacy_pair(tmp_path, table, b"the\t0\nbad\t1\n")
    with pytest.raises(VectorFileError, match=r"row 1 \(the vector of 'bad'\) holds NaN"):
        vectors(tmp_path, path, ["the", "bad"])


@pytest.mark.parametrize("lines", [1, 2])  # the header alone; the header and one vector
@pytest.mark.parametrize("end", ["", "\n", "\n\n"])  # blank lines after the cut hold no vector
def test_a_file_shorter_than_its_word2vec_header_says_is_truncated(
    tmp_path: Path, lines: int, end: str
) -> None:
    path = tmp_path / "v.txt"
    text = "3 2\nthe 1 2\nand 3 4\nfilm 5 6\n"
    path.write_text("".join(text.splitlines(keepends=True)[:lines]) + end, encoding="utf-8")
    said = f"promises 3 vectors, but the file ends after {lines - 1}: it looks truncated"
    with pytest.raises(VectorFileError, match=said):
        vectors(tmp_path, path, ["the"])


def test_a_number_too_large_for_float32_is_an_error_without_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "v.txt"
    path.write_text("the 1e99 2\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow warning would come first
        with pytest.raises(VectorFileError, match=r"v\.txt:1: the vector holds NaN, infinity"):
            vectors(tmp_path, path, ["the"])


# --- SQuAD preparation and prepared directories --------------------------------------------

CONTEXT = "Fort Bragg is in North Carolina. It opened in 1918."
OTHER = "Paris is the capital of France."


def squad() -> dict[str, Any]:
    def qa(qid: str, question: str, context: str, answer: str) -> dict[str, Any]:
        start = context.index(answer)
        return {
            "id": qid,
            "question": question,
            "answers": [{"text": answer, "answer_start": start}],
        }

    return {
        "version": "1.1",
        "data": [
            {
                "title": "Places",
                "paragraphs": [
                    {
                        "context": CONTEXT,
                        "qas": [
                            qa("q1", "Where is Fort Bragg?", CONTEXT, "North Carolina"),
                            qa("q2", "When did it open?", CONTEXT, "1918"),
                        ],
                    },
                    {"context": OTHER, "qas": [qa("q3", "What is Paris?", OTHER, "the capital")]},
                ],
            }
        ],
    }


def prepare_inputs(folder: Path, train: dict[str, Any]) -> tuple[Path, Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.json").write_text(json.dumps(train), encoding="utf-8")
    (folder / "dev.json").write_text(json.dumps(squad()), encoding="utf-8")
    words = ["fort", "is", "in", "the", "paris", "1918", "?", "."]
    lines = [f"{w} {i} 0.5 -1" for i, w in enumerate(words)]
    (folder / "vectors.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "train.json", folder / "dev.json", folder / "vectors.txt"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepare import prepare_squad

    folder = tmp_path_factory.mktemp("squad")
    prepare_squad(*prepare_inputs(folder, squad()), folder / "prepared", vectors_cache=folder)
    return folder / "prepared"


@pytest.fixture
def copy(prepared: Path, tmp_path: Path) -> Path:
    """A copy of the prepared directory, free to damage."""
    return Path(shutil.copytree(prepared, tmp_path / "prepared"))


def edit_meta(directory: Path, change: Any) -> None:
    meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
    change(meta)
    (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


def test_a_prepared_directory_records_the_treeqa_and_spacy_that_made_it(prepared: Path) -> None:
    import spacy

    import treeqa
    from treeqa.data.squad_prepared import load_meta, tokenizer_drift

    meta = load_meta(prepared)
    assert meta["treeqa_version"] == treeqa.__version__
    assert meta["tokenizer"] == {
        "name": 'spacy.blank("en").tokenizer',
        "spacy_version": spacy.__version__,
    }
    assert tokenizer_drift(meta, prepared) is None


def test_a_directory_tokenised_by_another_spacy_minor_version_is_one_warning(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    from treeqa.data.squad_prepared import PreparedSplit, tokenizer_drift

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.8.2")
    for made in ("3.8.0", "3.8.18"):  # patch releases keep the rules
        edit_meta(copy, lambda m, made=made: m["tokenizer"].update(spacy_version=made))
        assert tokenizer_drift(PreparedSplit(copy, "dev").meta, copy) is None
    edit_meta(copy, lambda m: m["tokenizer"].update(spacy_version="3.7.5"))
    note = tokenizer_drift(PreparedSplit(copy, "dev").meta, copy)
    assert note is not None and "\n" not in note
    assert note.startswith(f"{copy} was tokenised with spaCy 3.7.5, and this is spaCy 3.8.2:")
    assert "`treeqa predict qa`" in note


def test_a_directory_prepared_before_versions_were_recorded_still_loads(copy: Path) -> None:
    from treeqa.data.squad_prepared import PreparedSplit, tokenizer_drift

    edit_meta(copy, lambda m: [m.pop("treeqa_version"), m.pop("tokenizer")])
    split = PreparedSplit(copy, "train")
    assert len(split) and len(split.word_vocab()) and tokenizer_drift(split.meta, copy) is None


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.update(format_version=0),  # older
        lambda m: m.update(format_version=99),  # newer
        lambda m: m.pop("format_version"),
    ],
)
def test_a_prepared_directory_of_another_format_version_is_refused(copy: Path, change: Any) -> None:
    from treeqa.data.squad_prepared import PreparedSplit

    edit_meta(copy, change)
    with pytest.raises(ValueError, match=r"meta\.json: format version .* reads versions 1 to 2"):
        PreparedSplit(copy, "dev")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"format": "treeqa-squad", "format_version": 1', "not readable JSON"),
        ("[]", "not a treeqa SQuAD meta file"),
        ('{"format": "treeqa-squad", "format_version": 1}', "field 'version' is missing"),
        ('{"format": "treeqa-squad", "format_version": 2}', "field 'crc32' is missing"),
    ],
)
def test_a_broken_meta_file_is_named(copy: Path, text: str, problem: str) -> None:
    from treeqa.data.squad_prepared import PreparedSplit

    (copy / "meta.json").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=rf"meta\.json: {problem}"):
        PreparedSplit(copy, "dev")


def cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def garble(path: Path, old: bytes, new: bytes) -> None:
    """``old`` in the .npy header at ``path`` replaced by ``new``, of the same length."""
    data = path.read_bytes()
    assert len(old) == len(new) and old in data[:128]
    path.write_bytes(data.replace(old, new, 1))


@pytest.mark.parametrize(
    ("name", "damage", "problem"),
    [
        ("context_words", lambda p: cut(p, -4), "not a whole .npy array"),  # one token short
        ("starts", lambda p: cut(p, 30), "not a whole .npy array"),  # inside the header
        ("paragraph", lambda p: cut(p, 0), "not a whole .npy array"),  # empty
        # A header numpy's Python 2 fallback tokenizes (TokenError), or with a list for a key.
        ("starts", lambda p: garble(p, b"'shape': (", b"'shape'((("), "not a whole .npy array"),
        ("ends", lambda p: garble(p, b"'descr'", b"[1,2,3]"), "not a whole .npy array"),
        ("ends", lambda p: np.save(p, np.load(p)[:-1]), "2 rows, where paragraph.npy has 3"),
        ("paragraph", lambda p: np.save(p, np.load(p) + 5), "a paragraph index outside"),
        ("ends", lambda p: np.save(p, np.load(p) + 99), "an answer span outside its context"),
        ("ends", lambda p: p.unlink(), "missing"),
        # Ids past meta.json's vocabularies: an IndexError mid-epoch (a device assert on GPU).
        ("context_words", lambda p: np.save(p, np.load(p) + 10_000), "an id outside the"),
        ("question_chars", lambda p: np.save(p, np.load(p) + 900), "an id outside the"),
        ("question_words", lambda p: np.save(p, np.load(p) - 5), "an id outside the"),
    ],
)
def test_a_damaged_array_is_named_when_the_split_opens(
    copy: Path, name: str, damage: Any, problem: str
) -> None:
    from treeqa.data.squad_prepared import PreparedSplit

    damage(copy / "dev" / f"{name}.npy")
    with pytest.raises((ValueError, FileNotFoundError), match=rf"dev/{name}\.npy: {problem}"):
        PreparedSplit(copy, "dev")


def replace(old: bytes, new: bytes) -> Any:
    """A damage: ``old`` replaced by ``new``, of the same length, in a file."""

    def damage(path: Path) -> None:
        data = path.read_bytes()
        assert len(old) == len(new) and old in data
        path.write_bytes(data.replace(old, new, 1))

    return damage


def first_id_to(other: int) -> Any:
    """A damage: the first id of an array set to another, inside any vocabulary's range."""

    def damage(path: Path) -> None:
        ids = np.load(path)
        assert ids.flat[0] != other
        ids.flat[0] = other
        np.save(path, ids)

    return damage


@pytest.mark.parametrize(
    ("name", "damage", "read"),
    [
        ("dev/context_words.npy", first_id_to(1), lambda s: s),
        ("dev/question_words.npy", first_id_to(2), lambda s: s),
        ("dev/context_chars.npy", first_id_to(2), lambda s: s),
        ("dev/context_spans.npy", first_id_to(1), lambda s: s),
        ("dev/paragraph.npy", first_id_to(1), lambda s: s),
        ("word_vectors.npy", first_id_to(7), lambda s: s.word_vectors()),
        ("word_vocab.json", replace(b'"Paris"', b'"Parus"'), lambda s: s.word_vocab()),
        ("char_vocab.json", replace(b'"P"', b'"Q"'), lambda s: s.char_vocab()),
        ("dev/contexts.jsonl", replace(b"Carolina", b"Carolino"), lambda s: s.context(0)),
        ("dev/questions.jsonl", replace(b"Fort", b"Fert"), lambda s: s.question(0)),
        ("dev/gold.json", replace(b"Carolina", b"Carolino"), lambda s: s.gold()),
    ],
)
def test_a_change_no_range_check_sees_is_named_by_its_checksum(
    copy: Path, name: str, damage: Any, read: Any
) -> None:
    # A byte changed on disk or in a copy, which left ids in their vocabulary's range, spans in
    # their context and the JSON whole, read as other words, vectors or answers without a word.
    from treeqa.data.squad_prepared import PreparedSplit

    damage(copy / name)
    with pytest.raises(ValueError, match=rf"{name}: damaged: its bytes do not match the CRC-32"):
        read(PreparedSplit(copy, "dev"))


def test_a_changed_byte_is_named_by_its_file_where_a_check_of_another_sees_it(
    copy: Path,
) -> None:
    # One byte flipped in starts.npy put a start past its end: the span check said
    # "dev/ends.npy: an answer span outside its context", naming the file that had not changed.
    from treeqa.data.squad_prepared import PreparedSplit

    path = copy / "dev" / "starts.npy"
    starts = np.load(path)
    assert starts.dtype.byteorder in "<=|" and starts.itemsize > 1 and starts[0] >= 0
    data = bytearray(path.read_bytes())
    data[len(data) - starts.nbytes + 1] ^= 0x07  # the first start, plus 7 * 256
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"dev/starts\.npy: damaged: its bytes do not match"):
        PreparedSplit(copy, "dev")
    edit_meta(copy, lambda m: [m.pop("crc32"), m.update(format_version=1)])
    with pytest.raises(ValueError, match=r"dev/ends\.npy: an answer span outside its context"):
        PreparedSplit(copy, "dev")  # no checksums to tell which: as the check finds it


def test_a_directory_prepared_before_checksums_were_recorded_still_loads(copy: Path) -> None:
    from treeqa.data.squad_prepared import PreparedSplit

    edit_meta(copy, lambda m: [m.pop("crc32"), m.update(format_version=1)])
    split = PreparedSplit(copy, "dev")
    split.word_vocab(), split.char_vocab(), split.word_vectors(), split.gold()
    assert split.context(0) == CONTEXT and split.question(0) == "Where is Fort Bragg?"


@pytest.mark.parametrize("change", [lambda m: m.pop("crc32"), lambda m: m.update(crc32=[])])
def test_a_directory_of_this_format_without_its_checksums_is_refused(
    copy: Path, change: Any
) -> None:
    # meta.json damaged or edited: opened unchecked, a changed array would read as other ids
    from treeqa.data.squad_prepared import PreparedSplit

    edit_meta(copy, change)
    with pytest.raises(ValueError, match=r"meta\.json: field 'crc32' is missing or not of type"):
        PreparedSplit(copy, "dev")


def test_damaged_texts_and_vocabularies_are_named(copy: Path) -> None:
    from treeqa.data.squad_prepared import PreparedSplit

    dev = copy / "dev"
    contexts = dev / "contexts.jsonl"
    contexts.write_text(contexts.read_text(encoding="utf-8").splitlines()[0] + "\n", "utf-8")
    questions = dev / "questions.jsonl"
    questions.write_text(questions.read_text(encoding="utf-8")[:-10], encoding="utf-8")
    cut(copy / "word_vocab.json", 12)
    split = PreparedSplit(copy, "dev")
    with pytest.raises(ValueError, match=r"contexts\.jsonl: 1 lines, where the arrays need 2"):
        split.context(0)
    with pytest.raises(ValueError, match=r"questions\.jsonl:3: Unterminated string"):
        split.question_id(0)
    with pytest.raises(ValueError, match=r"word_vocab\.json: "):
        split.word_vocab()


@pytest.mark.parametrize(
    ("name", "damage", "problem"),
    [
        ("word_vocab.json", lambda p: p.unlink(), "missing"),
        ("char_vocab.json", lambda p: p.write_text('{"tokens": ["<pad>", "<unk>"]}'), "2 tokens"),
        ("word_vectors.npy", lambda p: np.save(p, np.load(p)[:-1]), "shape"),
    ],
)
def test_vocabularies_and_vectors_that_do_not_fit_meta_are_named(
    copy: Path, name: str, damage: Any, problem: str
) -> None:
    # A raw "The size of tensor a (10) must match the size of tensor b (9)" from the model,
    # or ids read as other words.
    from treeqa.data.squad_prepared import PreparedSplit
    from treeqa.models.qanet import QANetConfig
    from treeqa.recipes.qa import build_model

    damage(copy / name)
    split = PreparedSplit(copy, "train")
    with pytest.raises((ValueError, FileNotFoundError), match=rf"{name}: .*{problem}"):
        build_model(QANetConfig(word_dim=3, d_model=8, heads=1, char_dim=8), split)


@pytest.mark.parametrize("name", ["contexts.jsonl", "questions.jsonl", "gold.json"])
def test_a_missing_text_is_named_when_the_split_opens_not_at_the_first_evaluation(
    copy: Path, name: str
) -> None:
    from treeqa.data.squad_prepared import PreparedSplit

    (copy / "dev" / name).unlink()
    with pytest.raises(FileNotFoundError, match=rf"dev/{name}: missing"):
        PreparedSplit(copy, "dev")


def test_a_vectors_cache_inside_out_is_refused_before_tokenising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked only for a full --out with --overwrite: in a new --out the cache was written
    # inside the folder the output then replaced, so it was lost on every run.
    from treeqa.data import squad_prepare

    def tokenizer() -> None:
        raise AssertionError("tokenising began before the inputs were checked")

    monkeypatch.setattr(squad_prepare, "Tokenizer", tokenizer)
    out = tmp_path / "prepared"
    inputs = prepare_inputs(tmp_path, squad())
    with pytest.raises(FileExistsError, match=rf"{out / 'cache'} is an input .* inside {out}"):
        squad_prepare.prepare_squad(*inputs, out, vectors_cache=out / "cache")
    assert not out.exists()


def test_an_empty_split_is_refused_rather_than_trained_on_forever(copy: Path) -> None:
    from treeqa.data.squad_prepared import PreparedSplit

    train = copy / "train"  # zero examples, in arrays that agree with each other
    for name in ("paragraph", "starts", "ends"):
        np.save(train / f"{name}.npy", np.zeros(0, np.int32))
    for kind in ("context", "question"):
        np.save(train / f"{kind}_offsets.npy", np.zeros(1, np.int64))
        np.save(train / f"{kind}_words.npy", np.zeros(0, np.int32))
        np.save(train / f"{kind}_chars.npy", np.zeros((0, 16), np.uint16))
    np.save(train / "context_spans.npy", np.zeros((0, 2), np.int32))
    with pytest.raises(ValueError, match=r"train: the train split holds no examples"):
        PreparedSplit(copy, "train")


def test_prepare_refuses_a_split_with_no_examples_and_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepare import prepare_squad

    empty = squad() | {"data": []}
    out = tmp_path / "prepared"
    with pytest.raises(ValueError, match=r"train\.json: no train example kept of 0 questions"):
        prepare_squad(*prepare_inputs(tmp_path, empty), out, vectors_cache=tmp_path)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("missing", ["dev.json", "vectors.txt"])
def test_prepare_checks_its_inputs_before_tokenising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    from treeqa.data import squad_prepare

    def tokenizer() -> None:
        raise AssertionError("tokenising began before the inputs were checked")

    monkeypatch.setattr(squad_prepare, "Tokenizer", tokenizer)
    inputs = prepare_inputs(tmp_path, squad())
    (tmp_path / missing).unlink()
    with pytest.raises(FileNotFoundError, match=rf"{missing}: no such file"):
        squad_prepare.prepare_squad(*inputs, tmp_path / "prepared", vectors_cache=tmp_path)

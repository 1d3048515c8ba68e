import concurrent.futures
import gzip
import io
import json
import lzma
import os
import re
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from treeqa.data import vectors
from treeqa.data.vectors import VectorFileError, find_spacy_pair, load_vectors

GLOVE = "a 1 2 3\nb b 4 5 6\nthe 0.5 -0.25 1e-3\nApple 7 8 9\n"


def write(path: Path, text: str) -> Path:
    data = text.encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def load(path: Path, keys: list[str | None], tmp_path: Path, **kwargs: Any) -> vectors.Vectors:
    return load_vectors(path, keys, cache_dir=tmp_path / "cache", **kwargs)


def test_reads_tokens_with_spaces_and_reports_coverage(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", GLOVE)
    got = load(path, [None, "b b", "a", "the", "zzz"], tmp_path)
    assert got.matrix.shape == (5, 3) and got.matrix.dtype == np.float32
    np.testing.assert_array_equal(got.matrix[1], [4, 5, 6])
    np.testing.assert_array_equal(got.matrix[3], np.float32([0.5, -0.25, 1e-3]))
    assert got.found.tolist() == [False, True, True, True, False]
    r = got.report
    assert (r.rows, r.exact, r.lower, r.missing, r.padding) == (5, 3, 0, 1, 1)
    assert (r.lines_read, r.bad_lines, r.missing_examples) == (4, 0, ("zzz",))
    assert "3/4 keys found" in r.summary() and "'zzz'" in r.summary()


def test_utf8_tokens_match_and_undecodable_or_crlf_lines_do_not_break(tmp_path: Path) -> None:
    path = tmp_path / "v.txt"
    path.write_bytes("café 1 2 3\r\n".encode() + b"\xff\xfe 4 5 6\nx\ry 7 8 9\n")
    got = load(path, ["café", "x\ry"], tmp_path)
    np.testing.assert_array_equal(got.matrix, [[1, 2, 3], [7, 8, 9]])
    assert got.report.lines_read == 3


def test_gz_input_matches_plain(tmp_path: Path) -> None:
    keys: list[str | None] = ["a", "b b", "the"]
    plain = load(write(tmp_path / "v.txt", GLOVE), keys, tmp_path)
    packed = load(write(tmp_path / "v.txt.gz", GLOVE), keys, tmp_path)
    np.testing.assert_array_equal(plain.matrix, packed.matrix)


def test_wrong_width_line_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", "a 1 2 3\nb 1 2\nc 1 2 3\n")
    with pytest.raises(VectorFileError, match=r"v\.txt:2: expected a token and 3 numbers") as e:
        load(path, ["a"], tmp_path)
    assert e.value.line == 2 and e.value.source == str(path)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        # one row wider than the rest: not a token "b 0.4 0.5" with spaces
        ("a 0.1 0.2 0.3\nb 0.1 0.2 0.3 0.4 0.5\n", 2, "3 numbers (as on line 1), found 5"),
        # a narrow first row sets D: the next row says where D came from
        ("a 0.1 0.2\nb 0.1 0.2 0.3\n", 2, "2 numbers (as on line 1), found 3"),
        # a word2vec header that does not fit its rows
        ("2 2\na 0.1 0.2 0.3\n", 2, "2 numbers (as the header on line 1 says), found 3"),
    ],
)
def test_a_row_wider_than_the_file_is_an_error_naming_where_d_came_from(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = write(tmp_path / "v.txt", text)
    expected = re.escape(f"v.txt:{line}: expected a token and {message}")
    with pytest.raises(VectorFileError, match=expected):
        load(path, ["a", "b"], tmp_path)


def test_non_numeric_field_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", "a 1 2 3\nb 1 two 3\n")
    with pytest.raises(VectorFileError, match=r"v\.txt:2: .*non-numeric.*two"):
        load(path, ["b"], tmp_path)


def test_skip_mode_counts_bad_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", "a 1 2 3\nb 1 2\nc 1 x 3\n\nd 4 5 6\n")
    got = load(path, ["a", "c", "d"], tmp_path, on_bad_line="skip")
    assert got.found.tolist() == [True, False, True]
    assert (got.report.bad_lines, got.report.lines_read) == (3, 5)
    with pytest.raises(ValueError, match="on_bad_line"):
        load(path, ["a"], tmp_path, on_bad_line="ignore")


def test_truncated_last_line_is_an_error_even_when_skipping(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", "a 1 2 3\nb 4 5 6\nc 7 8")
    for mode in ("error", "skip"):
        with pytest.raises(VectorFileError, match=r"v\.txt:3: .*truncated"):
            load(path, ["a"], tmp_path, on_bad_line=mode)


def test_a_last_line_without_a_newline_is_said_in_the_report(tmp_path: Path) -> None:
    # Cut inside its last number ("... 0.05916" -> "... 0.05"), a line still reads: no check
    # can tell, so the report says the file may have been cut there.
    cut = load(write(tmp_path / "cut.txt", "a 1 2 3\nb 4 5 0.05"), ["b"], tmp_path)
    assert cut.report.unended and "line 2 has no newline; if the file was cut" in (
        cut.report.summary()
    )
    whole = load(write(tmp_path / "whole.txt", "a 1 2 3\nb 4 5 6\n"), ["b"], tmp_path)
    assert not whole.report.unended and "NOTE" not in whole.report.summary()


def test_truncated_gz_names_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    text = "".join(
        f"w{i} " + " ".join(f"{x:.6f}" for x in rng.normal(size=8)) + "\n" for i in range(500)
    )
    path = tmp_path / "v.txt.gz"
    path.write_bytes(gzip.compress(text.encode())[:-200])
    with pytest.raises(VectorFileError, match=r"v\.txt\.gz:\d+: .*truncated"):
        load(path, ["w1"], tmp_path)


def test_word2vec_header_gives_the_width(tmp_path: Path) -> None:
    path = write(tmp_path / "v.vec", "2 3\na 1 2 3\nb b 4 5 6\n")
    got = load(path, ["b b"], tmp_path)
    np.testing.assert_array_equal(got.matrix, [[4, 5, 6]])
    assert got.report.lines_read == 3


@pytest.mark.parametrize("name", ["v.bin", "v.bin.gz"])
def test_a_word2vec_binary_file_is_named_as_such(tmp_path: Path, name: str) -> None:
    # word2vec's .bin: a text header, then each token and its float32 bytes (here 0.0 and
    # 1.0: bytes 00 00 00 00 and 00 00 80 3f), which read as a short line of a cut file.
    a, b = np.array([[0, 1, 0, 1], [1, 0, 1, 0]], np.float32)
    data = b"2 4\n" + b"a " + a.tobytes() + b"b " + b.tobytes()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(VectorFileError, match=rf"{re.escape(name)}:2: .*word2vec binary file"):
        load(path, ["a"], tmp_path)


def test_a_zip_archive_is_named_as_such(tmp_path: Path) -> None:
    # GloVe and fastText ship as .zip; given as it was downloaded, it read as a tab-separated
    # first line.
    path = tmp_path / "glove.6B.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("glove.6B.50d.txt", GLOVE)
    with pytest.raises(VectorFileError, match=r"glove\.6B\.zip: a zip archive: unzip it"):
        load(path, ["a"], tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_named_pipe_is_read_once(tmp_path: Path) -> None:
    # The zip check opened the file to read its first bytes, then opened it again: a pipe
    # (``<(zcat glove.txt.gz)``) had given them to the first open, and the second waited for
    # a writer that never came.
    pipe = tmp_path / "v.txt"
    os.mkfifo(pipe)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pool.submit(pipe.write_text, GLOVE)
        loading = pool.submit(load, pipe, ["a", "the"], tmp_path)
        try:
            loaded = loading.result(timeout=30)
        except concurrent.futures.TimeoutError:
            pipe.write_bytes(b"")  # a writer that closes: the waiting open returns
            pytest.fail("the pipe was opened twice: the second open waited for a writer")
    expected = np.array([[1, 2, 3], [0.5, -0.25, 1e-3]], np.float32)
    np.testing.assert_array_equal(loaded.matrix, expected)


def test_given_width_overrides_the_first_line(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", "a a 1 2\nb 3 4\n")
    np.testing.assert_array_equal(load(path, ["a a"], tmp_path, dim=2).matrix, [[1, 2]])
    with pytest.raises(VectorFileError, match=r"v\.txt:2: expected a token and 3 numbers"):
        load(path, ["a a"], tmp_path)


def test_first_of_duplicate_tokens_wins(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", "a 1 2 3\na 4 5 6\n")
    np.testing.assert_array_equal(load(path, ["a"], tmp_path).matrix, [[1, 2, 3]])


def test_a_tab_separated_file_is_named_as_such(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", "a\t1\t2\t3\nb\t4\t5\t6\n")
    with pytest.raises(
        VectorFileError, match=r"v\.txt:1: the first line's fields are separated by tabs"
    ):
        load(path, ["a"], tmp_path)


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(VectorFileError, match="empty file"):
        load(write(tmp_path / "v.txt", ""), ["a"], tmp_path)


def test_lower_case_fallback_prefers_exact(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", GLOVE + "apple 1 1 1\n")
    got = load(path, ["THE", "Apple", "APPLE"], tmp_path)
    np.testing.assert_array_equal(
        got.matrix, np.float32([[0.5, -0.25, 1e-3], [7, 8, 9], [1, 1, 1]])
    )
    assert (got.report.exact, got.report.lower) == (1, 2)
    strict = load(path, ["THE", "Apple", "APPLE"], tmp_path, lower_fallback=False)
    assert strict.found.tolist() == [False, True, False]


def test_oov_rows_are_small_uniform_and_seeded(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", GLOVE)
    keys: list[str | None] = [f"missing{i}" for i in range(200)] + [None, "a"]
    got = load(path, keys, tmp_path)
    oov = got.matrix[:200]  # [200, 3]
    assert np.abs(oov).max() <= np.float32(0.05) and oov.std() > 0.02
    assert abs(float(oov.mean())) < 0.01  # centred: uniform(-0.05, 0.05)
    np.testing.assert_array_equal(got.matrix[200], [0, 0, 0])
    np.testing.assert_array_equal(got.matrix[201], [1, 2, 3])
    again = load_vectors(path, keys, cache_dir=tmp_path / "other")
    np.testing.assert_array_equal(got.matrix, again.matrix)
    other_seed = load(path, keys, tmp_path, seed=1)
    assert not np.array_equal(oov, other_seed.matrix[:200])
    assert np.abs(load(path, keys, tmp_path, oov_scale=0.001).matrix[:200]).max() <= 0.001


def test_cache_hit_is_identical_and_other_keys_miss(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path / "v.txt", GLOVE)
    first = load(path, ["a", "zzz", None], tmp_path)

    def no_reading(*args: object) -> None:
        raise AssertionError("the file was read again")

    monkeypatch.setattr(vectors, "_read_glove", no_reading)
    second = load(path, ["a", "zzz", None], tmp_path)
    np.testing.assert_array_equal(first.matrix, second.matrix)
    np.testing.assert_array_equal(first.found, second.found)
    assert first.report == second.report
    for keys in (["a", "zzz"], ["a", "zzz", "None"]):
        with pytest.raises(AssertionError, match="read again"):
            load(path, keys, tmp_path)


def test_changed_file_misses_the_cache(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", GLOVE)
    assert load(path, ["a"], tmp_path).matrix[0, 0] == 1
    write(path, GLOVE.replace("a 1 2 3", "a 9.5 2 3"))  # a new size, whatever the mtime
    assert load(path, ["a"], tmp_path).matrix[0, 0] == 9.5


@pytest.mark.parametrize("name, filler", [("v.txt", 0), ("v.txt.gz", 0), ("v.txt", 200_000)])
def test_a_same_size_file_put_in_place_with_its_mtime_kept_misses_the_cache(
    tmp_path: Path, name: str, filler: int
) -> None:
    # Keyed on path, size and mtime only, a replacement by ``cp -p`` or ``rsync -t`` (same
    # size, mtime kept) read the old file's vectors from the cache, silently. With filler
    # lines first (3 MB), the changed line lies past the first MiB.
    text = "".join(f"w{i} 0 0 0\n" for i in range(filler)) + GLOVE
    path = write(tmp_path / name, text)
    assert load(path, ["a"], tmp_path).matrix[0, 0] == 1
    before = path.stat()
    write(path, text.replace("a 1 2 3", "a 9 2 3"))
    assert path.stat().st_size == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert load(path, ["a"], tmp_path).matrix[0, 0] == 9


def entries(folder: Path) -> list[str]:
    """The cache entries in ``folder`` by their stem: the file's name and the key."""
    return sorted(p.name.removesuffix(".json") for p in folder.glob("*.json"))


def test_a_new_version_of_a_file_replaces_its_cached_tables_only(
    tmp_path: Path, monkeypatch
) -> None:
    # Each new version of a vectors file added its tables to the cache, for ever.
    path = write(tmp_path / "v.txt", GLOVE)
    (tmp_path / "elsewhere").mkdir()
    namesake = write(tmp_path / "elsewhere" / "v.txt", GLOVE)  # same name, another file
    other = write(tmp_path / "w.txt", GLOVE)
    for source, keys in [(path, ["a"]), (path, ["b b"]), (namesake, ["a"]), (other, ["a"])]:
        load(source, keys, tmp_path)
    kept = [e for e in entries(tmp_path / "cache") if e.startswith("w.txt")]
    before = entries(tmp_path / "cache")
    assert len(before) == 4 and len(list((tmp_path / "cache").iterdir())) == 12

    write(path, GLOVE.replace("a 1 2 3", "a 9.5 2 3"))
    assert load(path, ["a"], tmp_path).matrix[0, 0] == 9.5
    after = entries(tmp_path / "cache")
    new = sorted(set(after) - set(before))
    assert len(new) == 1 and len(after) == 3 and len(list((tmp_path / "cache").iterdir())) == 9
    assert kept == [e for e in after if e.startswith("w.txt")]
    # This version's tables under other keys stay; and the namesake's and the other file's
    # are still read from the cache.
    assert load(path, ["b b"], tmp_path).matrix[0, 0] == 4
    assert len(entries(tmp_path / "cache")) == 4

    def no_reading(*args: object) -> None:
        raise AssertionError("the file was read again")

    monkeypatch.setattr(vectors, "_read_glove", no_reading)
    assert load(namesake, ["a"], tmp_path).matrix[0, 0] == 1
    assert load(other, ["a"], tmp_path).matrix[0, 0] == 1


def test_a_new_table_of_a_spacy_pair_replaces_the_tables_read_through_either_file(
    tmp_path: Path,
) -> None:
    key2row = write_spacy(tmp_path)
    table = tmp_path / "m.vectors.3d.float32.npy.xz"
    load(key2row, ["cat"], tmp_path)
    load(table, ["cat"], tmp_path)
    assert len(entries(tmp_path / "cache")) == 2
    write(key2row, KEY2ROW.replace("cat\t2", "cat\t1"))
    np.testing.assert_array_equal(load(table, ["cat"], tmp_path).matrix, TABLE[1:2])
    assert [e.split(".")[0] for e in entries(tmp_path / "cache")] == [table.name.split(".")[0]]
    assert len(list((tmp_path / "cache").iterdir())) == 3


def test_writing_the_cache_deletes_temporaries_dead_writers_left_only(tmp_path: Path) -> None:
    # A write killed part-way left its temporary for ever. One written now (another process
    # on a folder they share) must stay, and so must files that are not the cache's.
    path = write(tmp_path / "v.txt", GLOVE)
    cache = tmp_path / "cache"
    cache.mkdir()
    dead = write(cache / f"v.txt.{'0' * 24}k2_x9qzt.tmp", "half a table")
    old = time.time() - 7 * 3600
    os.utime(dead, (old, old))
    writing = write(cache / f"v.txt.{'1' * 24}abcd1234.tmp", "half a table")
    mine = write(cache / "notes.tmp", "a file of the user's")
    os.utime(mine, (old, old))
    load(path, ["a"], tmp_path)
    assert not dead.exists() and writing.exists() and mine.exists()
    assert len(list(cache.iterdir())) == 5  # an entry's three files and the two kept


def test_entries_that_name_no_source_go_once_unused_for_a_month(
    tmp_path: Path, monkeypatch
) -> None:
    # Entries written before the cache recorded their source were never deleted: whose
    # version they are cannot be told, so only how long they have gone unread decides.
    path = write(tmp_path / "v.txt", GLOVE)
    cache = tmp_path / "cache"
    for keys in (["a"], ["b b"]):
        load(path, keys, tmp_path)
    old = time.time() - 31 * 86400
    for entry in cache.glob("*.json"):
        meta = json.loads(entry.read_text())
        del meta["built_from"]
        entry.write_text(json.dumps(meta))
        os.utime(entry, (old, old))
    load(path, ["a"], tmp_path)  # a hit renews its entry's JSON
    (unread,) = [e for e in entries(cache) if (cache / f"{e}.json").stat().st_mtime < old + 1]
    mine = write(cache / f"notes.{'2' * 24}.json", '{"rows": 1}')  # no arrays: not an entry
    os.utime(mine, (old, old))
    load(path, ["zzz"], tmp_path)  # a miss: the write prunes
    assert unread not in entries(cache) and not list(cache.glob(unread + ".*"))
    assert len(entries(cache)) == 3 and mine.exists()

    def no_reading(*args: object) -> None:
        raise AssertionError("the file was read again")

    monkeypatch.setattr(vectors, "_read_glove", no_reading)
    assert load(path, ["a"], tmp_path).matrix[0, 0] == 1  # the one read since stays


def test_corrupt_cache_is_rebuilt(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", GLOVE)
    first = load(path, ["a", "b b"], tmp_path)
    files = sorted((tmp_path / "cache").iterdir())
    assert sorted(f.name.split(".")[-1] for f in files) == ["json", "npy", "npy"]
    for f in files:
        f.write_bytes(f.read_bytes()[:20])
        again = load(path, ["a", "b b"], tmp_path)
        np.testing.assert_array_equal(first.matrix, again.matrix)
        assert first.report == again.report
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_a_cache_array_with_a_garbled_header_is_rebuilt(tmp_path: Path) -> None:
    """numpy reads a header it cannot parse as Python 2's, whose tokenizer raises TokenError
    on unbalanced brackets, not a ValueError."""
    path = write(tmp_path / "v.txt", GLOVE)
    first = load(path, ["a", "b b"], tmp_path)
    for f in sorted((tmp_path / "cache").glob("*.npy")):
        data = f.read_bytes()
        assert b"'shape': (" in data[:128]
        f.write_bytes(data.replace(b"'shape': (", b"'shape'(((", 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "created on Python 2"
            again = load(path, ["a", "b b"], tmp_path)
        np.testing.assert_array_equal(first.matrix, again.matrix)


def test_a_byte_flipped_in_a_cached_array_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    # A flip inside an array's data read as other vectors without a word: the cache kept no
    # checksum of what it holds.
    path = write(tmp_path / "v.txt", GLOVE)
    keys = ["a", "b b", "zzz", None]
    first = load(path, keys, tmp_path)
    for name in ("matrix", "found"):
        (array,) = (tmp_path / "cache").glob(f"*.{name}.npy")
        data = bytearray(array.read_bytes())
        data[-1] ^= 1  # in the padding row: zeros, and False
        array.write_bytes(bytes(data))
        message = f"{re.escape(str(array))}: damaged vectors cache"
        with pytest.warns(UserWarning, match=message) as caught:
            again = load(path, keys, tmp_path)
        assert len(caught) == 1
        np.testing.assert_array_equal(first.matrix, again.matrix)
        np.testing.assert_array_equal(first.found, again.found)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            load(path, keys, tmp_path)  # the entry was written again, whole


def test_a_changed_number_in_a_cached_report_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path / "v.txt", GLOVE)
    first = load(path, ["a", "zzz"], tmp_path)
    (entry,) = (tmp_path / "cache").glob("*.json")
    text = entry.read_text()
    assert '"missing": 1,' in text
    entry.write_text(text.replace('"missing": 1,', '"missing": 7,'))
    with pytest.warns(UserWarning, match=f"{re.escape(str(entry))}: damaged vectors cache"):
        again = load(path, ["a", "zzz"], tmp_path)
    assert again.report == first.report


def test_a_cached_matrix_whose_header_turned_to_fortran_order_is_rebuilt(tmp_path: Path) -> None:
    # Its bytes read in the other order: the rows mixed, and no checksum can be taken of it.
    path = write(tmp_path / "v.txt", GLOVE)
    first = load(path, ["a", "b b", "the"], tmp_path)
    (array,) = (tmp_path / "cache").glob("*.matrix.npy")
    array.write_bytes(
        array.read_bytes().replace(b"'fortran_order': False", b"'fortran_order': True ", 1)
    )
    np.testing.assert_array_equal(first.matrix, load(path, ["a", "b b", "the"], tmp_path).matrix)


def test_a_cache_entry_without_checksums_is_built_again_with_them(tmp_path: Path) -> None:
    # Written before they were recorded, or its JSON edited: unchecked, it could read as
    # other vectors; rebuilt once, without a warning, it is checked from then on.
    path = write(tmp_path / "v.txt", GLOVE)
    first = load(path, ["a", None], tmp_path)
    (entry,) = (tmp_path / "cache").glob("*.json")
    meta = json.loads(entry.read_text())
    del meta["crc32"]
    entry.write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = load(path, ["a", None], tmp_path)
    np.testing.assert_array_equal(first.matrix, second.matrix)
    assert "crc32" in json.loads(entry.read_text())


def test_default_cache_sits_beside_the_file_or_in_the_user_cache(
    tmp_path: Path, monkeypatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = write(data / "v.txt", GLOVE)
    load_vectors(path, ["a"])
    assert len(list((data / ".treeqa-cache").iterdir())) == 3

    shared = tmp_path / "shared"
    shared.mkdir()
    ro = write(shared / "v.txt", GLOVE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    shared.chmod(0o555)  # the mode bits mark it read-only even for root
    try:
        load_vectors(ro, ["a"])
    finally:
        shared.chmod(0o755)
    assert not (shared / ".treeqa-cache").exists()
    assert len(list((tmp_path / "home-cache" / "treeqa" / "vectors").iterdir())) == 3

    # A cache folder beside the file that another user made, read-only to us: it warned
    # "could not write the vectors cache" on every load and cached nothing.
    (data / ".treeqa-cache").chmod(0o555)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            load_vectors(path, ["b b"])
    finally:
        (data / ".treeqa-cache").chmod(0o755)
    assert len(list((data / ".treeqa-cache").iterdir())) == 3
    assert len(list((tmp_path / "home-cache" / "treeqa" / "vectors").iterdir())) == 6


def test_a_read_only_folder_and_no_home_folder_loads_without_a_cache(
    tmp_path: Path, monkeypatch
) -> None:
    # HOME unset for a user the system's user list lacks (a container's): Path.home() raised
    # "RuntimeError: Could not determine home directory." out of the command, a traceback.
    shared = tmp_path / "shared"
    shared.mkdir()
    ro = write(shared / "v.txt", GLOVE)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", no_home)
    shared.chmod(0o555)
    try:
        with pytest.warns(UserWarning, match=f"no vectors cache: {shared} is read-only .*HOME"):
            found = load_vectors(ro, ["a"])
    finally:
        shared.chmod(0o755)
    assert found.found.tolist() == [True] and sorted(p.name for p in shared.iterdir()) == ["v.txt"]


# --- spaCy layout --------------------------------------------------------------------------

TABLE = np.arange(12, dtype=np.float32).reshape(4, 3)  # [R=4, D=3]
KEY2ROW = "the\t0\nThe\t0\ncat\t2\nDog\t3\nmat\t2\n"


def write_spacy(
    tmp_path: Path, npy: str = "m.vectors.3d.float32.npy.xz", tsv: str = KEY2ROW
) -> Path:
    buf = io.BytesIO()
    np.save(buf, TABLE)
    data = lzma.compress(buf.getvalue()) if npy.endswith(".xz") else buf.getvalue()
    (tmp_path / npy).write_bytes(data)
    return write(tmp_path / "m.key2row.tsv.gz", tsv)


def test_spacy_pair_from_either_file(tmp_path: Path) -> None:
    key2row = write_spacy(tmp_path)
    table = tmp_path / "m.vectors.3d.float32.npy.xz"
    assert find_spacy_pair(key2row) == find_spacy_pair(table) == (table, key2row)
    assert find_spacy_pair(tmp_path / "glove.txt.gz") is None
    keys: list[str | None] = [None, "cat", "Dog", "MAT", "zzz", "THE"]
    for path in (key2row, table):
        got = load(path, keys, tmp_path)
        expected = np.stack([np.zeros(3), TABLE[2], TABLE[3], TABLE[2], got.matrix[4], TABLE[0]])
        np.testing.assert_array_equal(got.matrix, expected)
        assert got.found.tolist() == [False, True, True, True, False, True]
        assert (got.report.exact, got.report.lower, got.report.lines_read) == (2, 2, 5)


def test_a_link_to_one_file_of_a_spacy_pair_finds_its_partner_beside_the_file(
    tmp_path: Path,
) -> None:
    # The partner was looked for beside the link only: "found none" for a pair whose
    # table alone was linked into a folder of one's own.
    (tmp_path / "real").mkdir()
    (tmp_path / "mine").mkdir()
    key2row = write_spacy(tmp_path / "real")
    link = tmp_path / "mine" / "m.vectors.3d.float32.npy.xz"
    link.symlink_to(tmp_path / "real" / link.name)
    assert find_spacy_pair(link) == (link, key2row)
    np.testing.assert_array_equal(load(link, ["cat"], tmp_path).matrix, TABLE[2:3])
    (tmp_path / "real" / key2row.name).unlink()
    with pytest.raises(VectorFileError, match=rf"found none: .* in {tmp_path / 'mine'} or"):
        find_spacy_pair(link)


def test_report_counts_words_that_share_a_vector(tmp_path: Path) -> None:
    # "cat" and "mat" share row 2 (a pruned table); "THE" and "the" are one word.
    key2row = write_spacy(tmp_path)
    keys: list[str | None] = [None, "cat", "Dog", "MAT", "zzz", "THE", "the"]
    for _ in range(2):  # computed, then read back from the cache
        r = load(key2row, keys, tmp_path).report
        assert (r.distinct, r.shared, r.shared_examples) == (3, 2, (("cat", "mat"),))
        assert "5 found keys hold only 3 distinct vectors; 2 keys share" in r.summary()
        assert "'cat' = 'mat'" in r.summary()
    glove = write(tmp_path / "v.txt", GLOVE)
    r = load(glove, ["a", "the", "Apple"], tmp_path).report
    assert (r.distinct, r.shared) == (3, 0) and "WARNING" not in r.summary()


def test_spacy_plain_npy(tmp_path: Path) -> None:
    key2row = write_spacy(tmp_path, npy="m.vectors.npy")
    got = load(key2row, ["Dog"], tmp_path)
    np.testing.assert_array_equal(got.matrix, TABLE[3:4])


def test_spacy_missing_partner_is_a_clear_error(tmp_path: Path) -> None:
    key2row = write(tmp_path / "m.key2row.tsv.gz", KEY2ROW)
    with pytest.raises(VectorFileError, match=r"partner file, found none.*m\.vectors\*\.npy"):
        load(key2row, ["cat"], tmp_path)
    alone = tmp_path / "x.vectors.300d.npy.xz"
    alone.write_bytes(b"")
    with pytest.raises(VectorFileError, match=r"x\.key2row\.tsv"):
        load(alone, ["cat"], tmp_path)


def test_spacy_bad_tsv_lines(tmp_path: Path) -> None:
    key2row = write_spacy(tmp_path, tsv="the\t0\ncat 2\n")
    with pytest.raises(VectorFileError, match=r"key2row\.tsv\.gz:2: expected 'word<TAB>row'"):
        load(key2row, ["cat"], tmp_path)
    key2row = write_spacy(tmp_path, tsv="the\t0\ncat\t9\n")
    with pytest.raises(VectorFileError, match=r":2: row '9' is not an index into the table's 4"):
        load(key2row, ["cat"], tmp_path)
    got = load(key2row, ["the", "cat"], tmp_path, on_bad_line="skip")
    assert got.found.tolist() == [True, False] and got.report.bad_lines == 1


@pytest.mark.parametrize(("old", "new"), [(b"'shape': (", b"'shape'((("), (b"'descr'", b"[1,2,3]")])
def test_a_spacy_table_with_a_garbled_header_is_named(
    tmp_path: Path, old: bytes, new: bytes
) -> None:
    key2row = write_spacy(tmp_path, npy="m.vectors.npy")
    table = tmp_path / "m.vectors.npy"
    table.write_bytes(table.read_bytes().replace(old, new, 1))
    with (
        warnings.catch_warnings(),
        pytest.raises(VectorFileError, match=r"m\.vectors\.npy: not a readable \.npy array"),
    ):
        warnings.simplefilter("ignore", UserWarning)  # "created on Python 2"
        load(key2row, ["cat"], tmp_path)


def test_spacy_truncated_table(tmp_path: Path) -> None:
    key2row = write_spacy(tmp_path, npy="m.vectors.npy")
    table = tmp_path / "m.vectors.npy"
    table.write_bytes(table.read_bytes()[:-10])
    with pytest.raises(VectorFileError, match=r"ends after 3 of 4 rows"):
        load(key2row, ["cat"], tmp_path)
    xz = tmp_path / "m.vectors.npy.xz"
    table.unlink()
    buf = io.BytesIO()
    np.save(buf, TABLE)
    xz.write_bytes(lzma.compress(buf.getvalue())[:-30])
    with pytest.raises(VectorFileError, match=r"m\.vectors\.npy\.xz"):
        load(key2row, ["cat"], tmp_path)


# --- real data (opt in: pytest -m real_data) -----------------------------------------------


def data_dir() -> Path:
    return Path(
        os.environ.get("TREEQA_DATA") or Path(__file__).parents[2] / ".." / "shared" / "data"
    )


@pytest.mark.real_data
def test_real_glove_subset(tmp_path: Path) -> None:
    path = data_dir() / "vectors" / "glove.6B.50d.sst-squad-subset.txt.gz"
    if not path.exists():
        pytest.skip(f"no GloVe subset at {path}; set TREEQA_DATA")
    got = load_vectors(path, ["the", "Movie", "-LRB-", None], cache_dir=tmp_path)
    assert got.matrix.shape == (4, 50) and got.found.tolist() == [True, True, False, False]
    np.testing.assert_allclose(got.matrix[0, :3], [0.418, 0.24968, -0.41242])
    assert got.report.lines_read == 78388


def test_an_underscore_in_a_number_is_non_numeric(tmp_path: Path) -> None:
    # Python's float (which numpy uses for text) reads "1_0" as 10.
    path = write(tmp_path / "v.txt", "a 1 2 3\nb 1 1_0 3\n")
    with pytest.raises(VectorFileError, match=r"v\.txt:2: .*non-numeric.*'_'"):
        load(path, ["b"], tmp_path)


def test_blank_lines_at_the_end_are_no_vectors_but_one_between_vectors_is_named(
    tmp_path: Path,
) -> None:
    got = load(write(tmp_path / "end.txt", GLOVE + "\n  \n\t\n"), ["a", "the"], tmp_path)
    assert got.found.all() and got.report.lines_read == 7
    path = write(tmp_path / "mid.txt", "a 1 2 3\n\nb 4 5 6\n")
    with pytest.raises(VectorFileError, match=r"mid\.txt:2: .*found an empty line"):
        load(path, ["a"], tmp_path)

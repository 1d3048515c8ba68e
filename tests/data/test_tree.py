from pathlib import Path

import numpy as np
import pytest

from treeqa.data.tree import (
    TreeSyntaxError,
    iter_trees,
    parse_tree,
    read_trees,
    unescape_ptb,
    write_trees,
)

SST_LIKE = [
    "(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 good)) (2 .)))",
    "(1 (2 -LRB-) (1 (1 not) (2 co-writer\\/director)))",
    "(2 (2 8\u00a01\\/2) (2 ''))",
]


def test_round_trip_is_byte_exact(tmp_path: Path) -> None:
    src = tmp_path / "t.txt"
    src.write_text("\n".join(SST_LIKE) + "\n", encoding="utf-8")
    out = tmp_path / "o.txt"
    write_trees(read_trees(src), out)
    assert out.read_bytes() == src.read_bytes()


def test_a_tree_deeper_than_the_recursion_limit_is_written_back(tmp_path: Path) -> None:
    # The reader takes trees of any depth; the writer once recursed per level.
    text = "(2 w0)"
    for i in range(1, 5000):
        text = f"(2 {text} (3 w{i}))"
    src = tmp_path / "deep.txt"
    src.write_text(text + "\n", encoding="utf-8")
    out = tmp_path / "o.txt"
    write_trees(read_trees(src), out)
    assert out.read_bytes() == src.read_bytes()
    unlabelled = "(" * 3000 + "a" + ")" * 3000
    assert parse_tree(unlabelled).to_ptb() == unlabelled


@pytest.mark.parametrize("text", ["(good", "((the) (film", "(3 (2 a) (3"])
def test_a_tree_cut_off_after_a_token_is_unbalanced_not_a_bad_label(text: str) -> None:
    with pytest.raises(TreeSyntaxError, match="unbalanced '\\('") as caught:
        parse_tree(text)
    assert caught.value.column == len(text) + 1


def test_a_word_with_blanks_before_its_closing_bracket_is_a_leaf() -> None:
    # "( a)" was read as the leaf a, "(a )" refused: "label 'a' is not an integer in 0-4".
    for text in ("((a ) (b))", "((a\t) (b\n))", "(( a) ( b ))"):
        tree = parse_tree(text)
        assert tree.words == (None, "a", "b") and tree.labels.tolist() == [-1, -1, -1]
    assert parse_tree("(3 (2 a ) (1 b))").labels.tolist() == [3, 2, 1]
    with pytest.raises(TreeSyntaxError, match="1:4: empty node"):
        parse_tree("(2 )")  # a label, then nothing


def test_two_words_in_one_node_say_each_goes_in_brackets_of_its_own() -> None:
    message = "label 'the' is not an integer in 0-4; as words, each goes in brackets of its own"
    with pytest.raises(TreeSyntaxError, match=f"1:3: {message}: '\\(the\\) \\(film\\)'"):
        parse_tree("((the film) (is good))")


def test_structure_and_heights() -> None:
    t = parse_tree(SST_LIKE[0])
    assert t.label == 3
    assert t.words == (None, None, "The", "Rock", None, None, "is", "good", ".")
    assert t.children[0] == (1, 4)
    assert list(t.parent) == [-1, 0, 1, 1, 0, 4, 5, 5, 4]
    assert list(t.height) == [3, 1, 0, 0, 2, 1, 0, 0, 0]
    assert list(t.size) == [9, 3, 1, 1, 5, 3, 1, 1, 1]
    assert t.text() == "The Rock is good ."


def test_no_break_space_stays_inside_the_token() -> None:
    t = parse_tree(SST_LIKE[2])
    assert t.leaves == ["8\u00a01\\/2", "''"]


def test_a_tree_laid_out_over_lines_reads_as_on_one() -> None:
    """A pretty-printed tree pasted whole (predict, the server's page); errors then name the
    line and column within it."""
    assert parse_tree("(3 (2 the)\r\n   (3 film))").to_ptb() == "(3 (2 the) (3 film))"
    with pytest.raises(TreeSyntaxError, match=r"^f:4:12: a node holds either one word"):
        parse_tree("(3 (2 the)\n  (3 film) x)", "f", 3)


def test_ptb_unescape() -> None:
    assert [
        unescape_ptb(w)
        for w in ["-LRB-", "-RRB-", "co-writer\\/director", "\\*", "``", "''", "cat"]
    ] == ["(", ")", "co-writer/director", "*", '"', '"', "cat"]


@pytest.mark.parametrize(
    ("text", "column", "reason"),
    [
        ("(3 (2 a) (4 good)", 18, "unbalanced '('"),
        ("(3 (2 a)))", 10, "unbalanced ')'"),
        ("(3 (2 a)) (2 b)", 11, "a second tree"),
        ("(3 (2 a)) junk", 11, "trailing text"),
        ("(7 (2 a) (2 b))", 2, "label '7'"),
        ("(x (2 a) (2 b))", 2, "label 'x'"),
        ("(3 (2 a) (2 ))", 13, "empty node"),
        ("(3 (2 a (2 b)))", 9, "leaf cannot also have children"),
        ("(3 (2 a) b)", 10, "either one word or children, not both: found the word 'b'"),
        # A no-break space (an editor's, between brackets) looks like a space but is none.
        ("(3 (2 a)\u00a0(2 b))", 9, "found the word '\\xa0' after its children; only ASCII"),
        ("good movie", 1, "expected '('"),
        ("(2 (2 this) (2))", 13, "'(2)' reads as the word '2' with no label, in a labelled tree"),
    ],
)
def test_errors_name_file_line_and_column(
    tmp_path: Path, text: str, column: int, reason: str
) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("(2 (2 fine) (2 tree))\n" + text + "\n", encoding="utf-8")
    with pytest.raises(TreeSyntaxError) as err:
        read_trees(path)
    assert err.value.line == 2 and err.value.column == column
    assert str(err.value).startswith(f"{path}:2:{column}: ")
    assert reason in str(err.value)


def test_a_tree_laid_out_over_lines_in_a_file_says_a_tree_takes_one_line(tmp_path: Path) -> None:
    # As NLTK's str(tree) writes a long tree; it was only "unbalanced '('" on line 1.
    path = tmp_path / "trees.txt"
    path.write_text("(3 (2 the)\n   (3 film))\n", encoding="utf-8")
    with pytest.raises(TreeSyntaxError, match=r":1:11: unbalanced '\(': .* each tree whole on one"):
        read_trees(path)


def test_a_tree_given_whole_on_the_command_line_is_not_told_about_lines() -> None:
    with pytest.raises(TreeSyntaxError) as err:
        list(iter_trees(["(3 (2 the) (3 film)"], "<command line>"))
    assert err.value.reason.startswith("unbalanced '('") and "line" not in err.value.reason


def test_blank_lines_are_skipped_and_not_utf8_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("(2 a)\n\n(3 b)\n", encoding="utf-8")
    assert len(read_trees(path)) == 2
    path.write_bytes(b"(2 \xff)\n")
    with pytest.raises(TreeSyntaxError, match="not UTF-8"):
        read_trees(path)


def test_tabs_separate_like_spaces_and_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("\ufeff(2 (2 a)\t(3 b))\t\n\t\n(1\t(1 c) (2 d))\n", encoding="utf-8")
    first, second = read_trees(path)
    assert first.to_ptb() == "(2 (2 a) (3 b))" and second.to_ptb() == "(1 (1 c) (2 d))"
    assert parse_tree("((2) (film))").words == (None, "2", "film")  # unlabelled: "2" is a word


def test_not_utf8_names_the_line_and_column_of_the_bad_byte(tmp_path: Path) -> None:
    # The reader decodes ahead in blocks; the error must still point at line 3, not line 1.
    path = tmp_path / "t.txt"
    path.write_bytes(b"(2 a)\n(2 \xc3\xa9t\xc3\xa9)\n(2 \xc3\xa9g\xff)\n")  # line 2: valid UTF-8
    with pytest.raises(TreeSyntaxError) as err:
        read_trees(path)
    assert str(err.value) == f"{path}:3:6: not UTF-8 text (invalid start byte)"


def test_unlabelled_trees_parse_and_write() -> None:
    t = parse_tree("((the) ((movie) (rocks)))")
    assert np.all(t.labels == -1)
    assert t.to_ptb() == "((the) ((movie) (rocks)))"


def test_a_digit_word_under_a_root_label_alone_is_a_word() -> None:
    # A treebank labelled at the root only was refused at "(3)", though "(5)" was a word.
    text = "(4 (I) ((rated) (it)) ((3) (stars)))"
    tree = parse_tree(text)
    assert tree.tokens == ["I", "rated", "it", "3", "stars"]
    assert tree.labels.tolist() == [4] + [-1] * 7 and tree.to_ptb() == text
    # Where the other leaves carry labels, a word was lost, whichever comes first.
    with pytest.raises(TreeSyntaxError, match="1:4: '\\(2\\)' reads as the word '2'"):
        parse_tree("(2 (2) (2 this))")


@pytest.mark.real_data
def test_real_sst_counts_and_round_trip(real_data: Path, tmp_path: Path) -> None:
    counts = {"train": (8544, 318582), "dev": (1101, 41447), "test": (2210, 82600)}
    for split, (trees, nodes) in counts.items():
        path = real_data / "sst" / f"{split}.txt"
        parsed = read_trees(path)
        assert (len(parsed), sum(len(t) for t in parsed)) == (trees, nodes)
        write_trees(parsed, tmp_path / "out.txt")
        assert (tmp_path / "out.txt").read_bytes() == path.read_bytes()

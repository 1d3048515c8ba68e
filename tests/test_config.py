from dataclasses import dataclass, field
from pathlib import Path

import pytest

from treeqa.config import (
    ConfigError,
    changed_settings,
    check_fields,
    find_config,
    from_dict,
    load_toml,
    merge_overrides,
    parse_overrides,
    shipped_configs,
    to_toml,
)

CONFIGS = Path(__file__).parents[1] / "configs"


@dataclass(frozen=True)
class Inner:
    lr: float = 0.1
    steps: int = 3
    flag: bool = False
    betas: tuple[float, ...] = (0.9, 0.99)
    name: str = "inner"


@dataclass(frozen=True)
class Outer:
    name: str = "run"
    train: Inner = field(default_factory=Inner)


def test_overrides_parse_both_forms() -> None:
    assert parse_overrides(["--a=1", "--b", "2", "--flag", "--c-d=x"]) == [
        ("a", "1"),
        ("b", "2"),
        ("flag", "true"),
        ("c_d", "x"),
    ]
    with pytest.raises(ConfigError, match="expected --key"):
        parse_overrides(["oops"])


def test_toml_then_overrides_then_types(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\n[train]\nlr = 0.5\nsteps = 7\n')
    raw = load_toml(path)
    merged = merge_overrides(
        Outer,
        raw,
        [("steps", "9"), ("train.flag", "yes"), ("betas", "0.8,0.999"), ("wd", "2")],
        {"wd": "train.lr"},
    )
    config = from_dict(Outer, merged)
    assert config == Outer("x", Inner(lr=2.0, steps=9, flag=True, betas=(0.8, 0.999)))
    again = from_dict(Outer, load_toml_text(tmp_path, to_toml(config)))
    assert again == config
    # The list as a config file writes it works as an override too (it read "[0.8").
    for written in ("[0.8, 0.9]", "(0.8, 0.9)"):
        merged = merge_overrides(Outer, raw, [("betas", written)], {})
        assert from_dict(Outer, merged).train.betas == (0.8, 0.9)


def load_toml_text(tmp_path: Path, text: str) -> dict:
    p = tmp_path / "again.toml"
    p.write_text(text)
    return load_toml(p)


def test_bare_top_level_key_wins_over_section_key() -> None:
    assert merge_overrides(Outer, {}, [("name", "basic")]) == {"name": "basic"}
    assert merge_overrides(Outer, {}, [("train.name", "b")]) == {"train": {"name": "b"}}


def test_unknown_keys_and_bad_values_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean lr"):
        merge_overrides(Outer, {}, [("lrr", "1")])
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        from_dict(Outer, {"train": {"bogus": 1}})
    with pytest.raises(ConfigError, match="expected an integer"):
        from_dict(Outer, {"train": {"steps": "many"}})
    with pytest.raises(ConfigError, match="expected true or false"):
        from_dict(Outer, {"train": {"flag": "maybe"}})
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nlr=1")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_toml(bad)


def test_a_key_given_under_another_section_says_where_it_is() -> None:
    from treeqa.recipes.qa import resolve_config

    with pytest.raises(ConfigError, match=r"^--train\.eval_every: train has no key 'eval_every'; "
                       r"it is --schedule\.eval_every$"):  # fmt: skip
        resolve_config({}, [("train.eval_every", "5")])


def test_a_config_written_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf[train]\nlr = 0.1\n")
    assert load_toml(bom) == {"train": {"lr": 0.1}}


def test_a_config_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"[train]\nlr = 1\n# caf\xe9\n")
    with pytest.raises(ConfigError) as err:
        load_toml(bad)
    assert str(err.value) == f"{bad}:3: not UTF-8 text (invalid continuation byte)"


def test_check_fields_names_the_section_and_field() -> None:
    check_fields(Inner(), "train", at_least={"lr": 0, "steps": 1}, choices={"name": ("inner",)})
    with pytest.raises(ConfigError, match=r"^train\.steps: expected at least 1, got -2$"):
        check_fields(Inner(steps=-2), "train", at_least={"steps": 1})
    with pytest.raises(ConfigError, match=r"^train\.lr: expected a finite number, got nan$"):
        check_fields(Inner(lr=float("nan")), "train", at_least={"lr": 0})
    with pytest.raises(ConfigError, match=r"^train\.lr: expected less than 1, got 1\.5$"):
        check_fields(Inner(lr=1.5), "train", below={"lr": 1})
    with pytest.raises(ConfigError, match=r"^train\.name: expected one of a \| b, got 'c'$"):
        check_fields(Inner(name="c"), "train", choices={"name": ("a", "b")})


def test_a_section_given_a_plain_value_is_named_not_a_traceback() -> None:
    with pytest.raises(ConfigError, match="config.train: expected a section \\(table\\), got 3"):
        merge_overrides(Outer, {"train": 3}, [("lr", "0.2")])


def test_infinity_is_out_of_every_range() -> None:
    with pytest.raises(ConfigError, match="train.lr: expected a finite number, got inf"):
        check_fields(Inner(lr=float("inf")), "train", at_least={"lr": 0})


def test_an_integer_beyond_64_bits_is_refused_not_written_to_config_toml() -> None:
    # TOML's integers are 64-bit: such a value made a config.toml other readers refuse.
    for given in ("99999999999999999999999", str(-(2**63) - 1)):
        with pytest.raises(ConfigError, match="train.steps: expected a 64-bit integer"):
            from_dict(Outer, merge_overrides(Outer, {}, [("steps", given)]))
    with pytest.raises(ConfigError, match="train.steps: expected a 64-bit integer"):
        from_dict(Outer, {"train": {"steps": 1e30}})  # a TOML float with no fraction
    limit = str(2**63 - 1)
    assert from_dict(Outer, merge_overrides(Outer, {}, [("steps", limit)])).train.steps == 2**63 - 1


def test_a_named_flag_and_an_override_of_its_key_must_agree() -> None:
    # The named flag's place on the command line is lost; two values for one key are refused.
    with pytest.raises(ConfigError, match="--steps 1 and --train.steps=2 both set train.steps"):
        merge_overrides(Outer, {}, [("steps", "1"), ("train.steps", "2")], named=1)
    agreed = merge_overrides(Outer, {}, [("steps", "1"), ("train.steps", "1")], named=1)
    assert agreed["train"]["steps"] == "1"
    # Among plain overrides the later still wins.
    assert merge_overrides(Outer, {}, [("lr", "1"), ("train.lr", "2")])["train"]["lr"] == "2"


def test_strings_with_newlines_and_control_characters_round_trip_through_toml() -> None:
    import tomllib

    odd = Outer(name='a\nb"c\\d\x7f\x01 é 😀')
    assert from_dict(Outer, tomllib.loads(to_toml(odd))) == odd


def test_a_shipped_config_is_found_by_name_away_from_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sorted(shipped_configs()) == sorted(p.stem for p in CONFIGS.glob("*.toml"))
    for name in ("tree_lstm_fine", "tree_lstm_fine.toml"):
        found = find_config(Path(name))
        assert found.read_bytes() == (CONFIGS / "tree_lstm_fine.toml").read_bytes()
    (tmp_path / "tree_lstm_fine.toml").write_text('name = "mine"\n')  # a file here comes first
    assert load_toml(find_config(Path("tree_lstm_fine.toml"))) == {"name": "mine"}


def test_a_config_that_is_not_there_says_what_treeqa_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^configs/qanet_paper.toml: .* --config qanet_paper$"):
        find_config(Path("configs/qanet_paper.toml"))
    with pytest.raises(ConfigError, match=r"^tree_lstm: no such file, nor .*tree_lstm_fine"):
        find_config(Path("tree_lstm"))
    assert find_config(Path("elsewhere/mine.toml")) == Path("elsewhere/mine.toml")
    with pytest.raises(ConfigError, match=r"^elsewhere/mine.toml: cannot read config"):
        load_toml(find_config(Path("elsewhere/mine.toml")))


def test_a_setting_a_stored_run_does_not_name_is_compared_with_its_default() -> None:
    """A run written before a setting existed had its default: resuming it with the default
    is no change (it was refused, None -> the default), with another value it is one."""
    stored = 'name = "run"\n\n[train]\nlr = 0.1\nsteps = 3\nflag = false\nname = "inner"\n'
    assert changed_settings(stored, Outer(), free=()) == []  # betas came later: its default
    later = Outer(train=Inner(betas=(0.8, 0.999)))
    assert changed_settings(stored, later, free=()) == ["train.betas: [0.9, 0.99] -> [0.8, 0.999]"]
    assert changed_settings(stored, Outer(train=Inner(lr=0.2)), free=()) == ["train.lr: 0.1 -> 0.2"]

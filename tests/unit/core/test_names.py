"""NameRule's sanitizing of a value that starts a name: the prefix, where it comes from, and that
it travels with the rule. (The five services' rules are tested in tests/unit/routing.)"""

from __future__ import annotations

import pickle

import pytest

from pyflink_gcp.core.names import NameRule


def rule(**settings: object) -> NameRule:
    base: dict[str, object] = {
        "allowed": "_",
        "replacement": "_",
        "min_length": 1,
        "max_length": 20,
    }
    base.update(settings)
    return NameRule("x id", **base)  # type: ignore[arg-type]


def test_a_rule_without_a_first_character_rule_never_prefixes():
    free = rule()
    assert free.prefix == ""
    assert free.sanitize("9a/b", at_start=True) == "9a_b"


def test_letters_only_at_the_start_prefix_a_digit_with_x():
    letters = rule(first="")
    assert letters.prefix == "x"
    assert letters.sanitize("9lives", at_start=True) == "x9lives"
    assert letters.sanitize("/eu", at_start=True) == "x_eu"  # the separator may not start either
    assert letters.sanitize("eu", at_start=True) == "eu"
    assert letters.sanitize("9lives") == "9lives"  # not at the start: as it is
    assert letters.sanitize("", at_start=True) == ""
    assert letters.validate(letters.sanitize("9lives", at_start=True)) is None


def test_the_replacement_is_the_prefix_when_it_may_start_a_name():
    underscore = rule(first="_", first_digit=False, allowed="_-")
    assert underscore.prefix == "_"
    assert underscore.sanitize("-x", at_start=True) == "_-x"
    assert underscore.sanitize("9x", at_start=True) == "_9x"


def test_a_digit_allowed_first_is_not_prefixed():
    digits = rule(first="_", first_digit=True)
    assert digits.sanitize("9x", at_start=True) == "9x"


def test_a_prefix_of_ones_own():
    topic = rule(first="", prefix="t")
    assert topic.sanitize("9x", at_start=True) == "t9x"
    assert topic != rule(first="")  # the prefix is part of the rule's value


@pytest.mark.parametrize("prefix", ["", "_", "9", "a/"])
def test_a_prefix_that_could_not_start_a_valid_name_is_refused(prefix):
    with pytest.raises(ValueError, match="must be allowed text that may start a name"):
        rule(first="", prefix=prefix)


def test_the_prefix_travels_with_the_rule():
    topic = rule(first="", prefix="t")
    copy = pickle.loads(pickle.dumps(topic))
    assert copy == topic and copy.prefix == "t"
    assert copy.sanitize("9x", at_start=True) == "t9x"


def test_a_valid_value_is_returned_as_it_is():
    letters = rule(first="")
    value = "abc"
    assert letters.sanitize(value, at_start=True) is value


def test_check_literal_explains_a_value_too():
    letters = rule(first="")
    assert letters.check_literal("ok", at_start=True) is None
    assert letters.check_literal("a/b", at_start=False) == (
        1,
        "'/' is not allowed; a x id allows only letters, digits and underscores",
    )
    assert letters.check_literal("9a", at_start=True) == (
        0,
        "starts with '9'; a x id starts with a letter",
    )

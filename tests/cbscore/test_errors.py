"""Issue 41, finding 1: an error shows a line of its value and of its reason, never a document."""

from __future__ import annotations

from cbscore.errors import ConfigError, clipped, shown


def test_a_value_is_shown_up_to_80_characters_with_the_length_it_had():
    assert shown("short") == "'short'"
    assert shown("x" * 100) == "'" + "x" * 79 + "… (102 characters)"
    assert shown(list(range(1000))).endswith("… (4,890 characters)") and len(shown(list(range(1000)))) < 110


def test_a_config_error_quotes_at_most_80_characters_of_the_value_and_600_of_the_reason():
    err = ConfigError("b_ref", "token: " + "s" * 10_000, "must be one of batch_sizes " + str(list(range(9000))))
    text = str(err)
    assert text.startswith("b_ref: must be one of batch_sizes [0, 1, 2, ")
    assert text.endswith("…, but got 'token: " + "s" * 72 + "… (10,009 characters).")
    assert len(text) == 720 and err.value == "token: " + "s" * 10_000  # the whole value stays on the error
    assert clipped("abc", 2) == "ab…" and clipped("abc", 3) == "abc"

"""Issue 41, finding 7: a URL is shown with its password masked (cbscore.errors)."""

from __future__ import annotations

import pytest

from cbscore.errors import masked, masked_url


@pytest.mark.parametrize("url, shown", [
    ("redis://:hunter2@redis:6379/0", "redis://:***@redis:6379/0"),
    ("postgresql://cbs:hunter2@db/cbs_mlflow", "postgresql://cbs:***@db/cbs_mlflow"),
    ("postgresql+psycopg2://cbs:p%40ss@db:5432/x?sslmode=require", "postgresql+psycopg2://cbs:***@db:5432/x?sslmode=require"),
    ("amqp://guest:p@ss@rabbit//", "amqp://guest:***@rabbit//"),  # an unescaped "@" in the password
    ("redis://redis:6379/0", "redis://redis:6379/0"),  # no password: nothing to mask
    ("redis://user@redis:6379/0", "redis://user@redis:6379/0"),
    ("sqlite:////home/lab/mlflow.db", "sqlite:////home/lab/mlflow.db"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
])
def test_a_url_is_shown_with_its_password_masked(url, shown):
    assert masked_url(url) == shown


def test_every_url_in_a_message_is_masked_and_the_rest_is_kept():
    text = ("the broker 'redis://:hunter2@10.0.0.5:6379/0' does not answer; the store at "
            "`postgresql://cbs:s3cr3t@db/cbs` neither (see http://docs.test:8000/a:b@c)")
    assert masked(text) == ("the broker 'redis://:***@10.0.0.5:6379/0' does not answer; the store at "
                            "`postgresql://cbs:***@db/cbs` neither (see http://docs.test:8000/a:b@c)")

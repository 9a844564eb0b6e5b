"""Issue 41's refusals against a live ``cbs web`` with sign-in (a real OIDC provider on 127.0.0.1)
and chromium, as a signed-in user who is no admin meets them: Extend with a server path (finding 1),
a design past the lab's ceiling (finding 4), a store folder outside the lab's store folder or named
as another settings' store, and one that holds the store another study reads (finding 6), a huge
vocabulary and a steps CSV of a million rows (finding 9), and a tracking-store or broker outage
whose URL holds a password (finding 7). Each names its field and arrives within :data:`SHOWN_WITHIN_S`
of the click that asked for it (the page's whole rerun, in a browser, on a shared two-core host;
the checks themselves take milliseconds: tests/workers/test_data_roots.py, test_launch_ceilings.py)."""

from __future__ import annotations

import hashlib
import re
import socket
import time
from pathlib import Path

import pytest

from tests.app.test_e2e_browser import (
    CHROMEDRIVER,
    CHROMIUM,
    _button,
    _input,
    _open_expander,
    _open_popover,
    _wait,
    chromium,
)
from tests.app.test_live_sign_in import _rss_mib, wait_warm, web_signing_in
from tests.app.test_sign_in import ALICE, BOB, provider, sign_in, text, web_with_sign_in  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

#: Seconds from a click to its refusal on the page, at most: the first Launch click of a fresh web
#: process too, once the process says it is warm (it imports the workers' stack as it starts:
#: app/warm_up.py; before that the first Launch click took 6-7.7 s).
#: A bound against a hang, not a speed goal (no timed tests here): at load 4-7 the refusals showed in
#: 0.1-2.1 s (issue 41's note); CI's loaded cores once took 3.5 s.
SHOWN_WITHIN_S = 10.0
SECRET = "gho_live0123456789abcdefSECRET"
TINY = """name: {name}
kind: custom
settings:
  - {{model: tiny-0.1M, tokens: 8000}}
batch_sizes: [2, 4, 8]
context_tokens: 16
b_ref: 4
search: {{kind: grid, lrs: [0.01]}}
data: {{source: builtin, vocab_size: {vocab}, max_documents: 120, val_fraction: 0.1{store}}}
"""


def _error_after(driver, click, needle: str) -> tuple[str, float]:
    """``click()``, then the first error message that holds ``needle`` and how long it took."""
    from selenium.webdriver.common.by import By

    def shown(d):
        for alert in d.find_elements(By.CSS_SELECTOR, "[data-testid='stAlertContentError']"):
            said = alert.text  # read once: the element is redrawn while the page reruns
            if needle in said:
                return said
        return None

    start = time.monotonic()
    click()
    try:
        message = _wait(driver, shown, 60, f"an error holding {needle!r}")
    except Exception:
        raise AssertionError(f"no error holding {needle!r}; the page: {text(driver)[-1500:]}") from None
    return message, time.monotonic() - start


def _launch_refused(driver, needle: str) -> tuple[str, float]:
    """Click "Launch study" on a form just filled from YAML; the page's race guard holds a click
    sent before the browser drew the fill ("Not launched: the browser sent the form before…"),
    so that click is made again. The refusal holding ``needle``, and how long the last click took."""
    from selenium.webdriver.common.by import By

    for _ in range(3):
        start = time.monotonic()
        _button(driver, "Launch study").click()

        def answered(d):
            for alert in d.find_elements(By.CSS_SELECTOR, "[data-testid='stAlertContentError']"):
                said = alert.text  # read once: the element is redrawn while the page reruns
                if needle in said:
                    return ("refused", said)
            if "Not launched: the browser sent the form before" in text(d):
                return ("held", "")
            return None

        kind, message = _wait(driver, answered, 60, f"a refusal holding {needle!r}")
        if kind == "refused":
            return message, time.monotonic() - start
        _held_plan(driver)
    raise AssertionError(f"the launch was held three times; the page: {text(driver)[-800:]}")


def _held_plan(driver) -> None:
    """After a held launch the page puts the form back and shows its plan; under CI's load that rerun
    can itself be cut short (stop 51: no plan in 60 s), and the caller clicks Launch again anyway."""
    try:
        _wait(driver, lambda d: "Plan of" in text(d), 30, "the held form's plan")
    except Exception:
        pass


def _launched(driver, name: str) -> None:
    """Click "Launch study" until the study ``name`` is launched (its Studies page opens); a click
    the race guard held (see :func:`_launch_refused`) is made again."""
    for _ in range(3):
        _button(driver, "Launch study").click()
        kind = _wait(driver, lambda d: "launched" if f"study={name}" in d.current_url else
                     "held" if "Not launched: the browser sent the form before" in text(d) else None, 90, "the launch")
        if kind == "launched":
            _wait(driver, lambda d: "Status" in text(d), 60, f"{name}'s Studies page")
            return
        _held_plan(driver)
    raise AssertionError(f"the launch was held three times; the page: {text(driver)[-800:]}")


def _load_yaml(driver, yaml_text: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = _open_expander(driver, "Paste or upload a YAML spec", "YAML spec", "textarea")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(yaml_text)
    _button(driver, "Load YAML into the form").click()


def test_launch_refusals_past_a_ceiling_a_store_folder_and_a_vocabulary_name_their_field(tmp_path, provider):
    from cbscore.data import DataConfig

    home = tmp_path / "home"
    env = {"CBS_MAX_TRIALS": "10", "CBS_STORE_ROOTS": ""}  # the demo plans 45 trials
    with web_with_sign_in(tmp_path, provider, env) as (web, log), chromium(tmp_path / "profile") as driver:
        sign_in(driver, web, ALICE)
        _wait(driver, lambda d: "Launch a study" in text(d), 60, "the Launch page")
        print(wait_warm(log))
        took = {}
        # finding 4: a user who is no admin past the lab's ceiling; the spec's own max_trials is 2,000
        message, took["ceiling"] = _error_after(driver, _button(driver, "Preview").click, "(trials)")
        assert "the study plans more than the lab's ceiling of 10 trials (CBS_MAX_TRIALS" in message, message
        assert "Plan of" not in text(driver)
        # finding 9: a vocabulary of 2**32 - 1 (it aborted the trial process); the first Launch click
        _load_yaml(driver, TINY.format(name="huge", vocab=2**32 - 1, store=""))
        _wait(driver, lambda d: _input(d, "Study name").get_attribute("value") == "huge", 30, "the form filled")
        message, took["vocabulary"] = _launch_refused(driver, "vocab_size")
        assert "4294967295" in message, message
        # finding 6: a store folder in the corpus root, and one named as another settings' store
        victim = DataConfig(vocab_size=512, max_documents=120, val_fraction=0.1).key()
        other = DataConfig(vocab_size=300, max_documents=120, val_fraction=0.1).key()
        for case, folder, reason in (
                ("corpus root", home / "corpora" / "mine", "must be a folder inside the lab's store folder"),
                ("other settings' store", home / "data" / other, "is named as the default store of other settings")):
            _load_yaml(driver, TINY.format(name="stores", vocab=512, store=f", store_dir: {folder}"))
            _wait(driver, lambda d: _input(d, "Study name").get_attribute("value") == "stores", 30, "the form filled")
            message, took[case] = _launch_refused(driver, reason)  # not the last case's message, still shown
            assert "(data.store_dir)" in message and str(folder)[:40] in message, message
            assert not folder.exists()
        assert victim != other
        print("refusal shown after (s):", {k: round(v, 2) for k, v in took.items()})
        # "vocabulary" is the fresh process's first Launch click: the checks take 0.03 s in process,
        # and the stack they need was imported as the server started.
        assert max(took.values()) < SHOWN_WITHIN_S, took


def test_extend_with_a_server_path_shows_neither_the_file_nor_whether_it_exists(tmp_path, provider):
    """Finding 1: a signed-in owner typed the path of a ``hosts.yml`` holding a token into Extend."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    hosts = tmp_path / "hosts.yml"
    hosts.write_text(f"github.com:\n  oauth_token: {SECRET}\n  user: someone\n")
    with web_with_sign_in(tmp_path, provider) as (web, log), chromium(tmp_path / "profile") as driver:
        sign_in(driver, web, ALICE)
        _wait(driver, lambda d: "Launch a study" in text(d), 60, "the Launch page")
        _button(driver, "Launch study").click()  # the demo preset: Alice owns it
        _wait(driver, lambda d: "/studies" in d.current_url and ALICE in text(d), 90, "the Studies page")
        took = {}
        for case, path in (("a file", hosts), ("no file", tmp_path / "nowhere.yml")):
            driver.get(f"{web}/studies?study=demo")
            patch = _open_popover(driver, "Extend or retry…", "Patch (YAML)", "textarea")
            patch.send_keys(Keys.CONTROL, "a")
            patch.send_keys(Keys.DELETE)
            patch.send_keys(str(path))
            patch.send_keys(Keys.CONTROL, Keys.ENTER)  # commit the text area's value before the click
            message, took[case] = _error_after(driver, _button(driver, "Extend the study").click, "(patch)")
            assert "must be a mapping of the study fields to change" in message, message
            assert SECRET not in driver.page_source and "oauth_token" not in driver.page_source
            # The value is shown cut to its first characters (cbscore.errors): cut or whole, it is the
            # typed text, so compare the rest of the two messages.
            took[case + " message"] = re.sub(r"\S*… \([\d,]+ characters\)", "PATH", message.replace(str(path), "PATH"))
        assert took["a file message"] == took["no file message"]  # no oracle of what exists
        print("refusal shown after (s):", took["a file"], took["no file"])
        assert max(took["a file"], took["no file"]) < SHOWN_WITHIN_S, took
        assert driver.find_elements(By.TAG_NAME, "body")


def _closed_port() -> int:
    with socket.socket() as s:  # bound and closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tracking_store_outage_shows_its_url_with_the_password_masked(tmp_path, provider):
    """Finding 7: every page showed ``postgresql://user:password@…`` while the tracking DB was down."""
    from app.warm_up import STOPPED_LINE

    port = _closed_port()
    env = {"CBS_TRACKING_URI": f"postgresql://cbs:hunter2-db@127.0.0.1:{port}/cbs_mlflow"}
    with web_with_sign_in(tmp_path, provider, env) as (web, log), chromium(tmp_path / "profile") as driver:
        sign_in(driver, web, ALICE)
        driver.get(f"{web}/studies")
        masked = f"postgresql+psycopg2://cbs:***@127.0.0.1:{port}/cbs_mlflow"
        _wait(driver, lambda d: masked in text(d), 60, "the outage's message")
        assert "hunter2-db" not in driver.page_source
        print(wait_warm(log, line=STOPPED_LINE))  # the warm-up met the outage too, and said so
    assert "hunter2-db" not in Path(log).read_text()  # nor the web app's log


def test_a_broker_outage_at_launch_shows_the_broker_url_with_the_password_masked(tmp_path, provider):
    """Finding 7: the Launch page showed ``redis://:password@…`` (the runner's message) while the
    broker was down."""
    port = _closed_port()
    env = {"CBS_BROKER_URL": f"redis://:hunter2-broker@127.0.0.1:{port}/0"}
    with web_with_sign_in(tmp_path, provider, env) as (web, log), chromium(tmp_path / "profile") as driver:
        sign_in(driver, web, ALICE)
        _wait(driver, lambda d: "Launch a study" in text(d), 60, "the Launch page")
        print(wait_warm(log))
        message, took = _launch_refused(driver, "does not answer")  # the demo preset, as the form opens
        assert f"the broker 'redis://:***@127.0.0.1:{port}/0' does not answer" in message, message
        assert "nothing was launched" in message, message
        assert "hunter2-broker" not in driver.page_source
        print(f"refusal shown after {took:.2f} s")
        # the runner's broker check retries once 0.2 s later (kombu's 2 s default made this 2.7-3.6 s)
        assert took < SHOWN_WITHIN_S, took
    assert "hunter2-broker" not in Path(log).read_text()  # nor the web app's log


def _files(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``folder``: its SHA-256 and modification time (ns), by relative path."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_spec_cannot_replace_the_store_another_users_study_reads(tmp_path, provider, monkeypatch):
    """Finding 6: ``data.store_dir`` could name a folder that held another study's token store; the
    launch prepared a store of other settings there, and the victim's trials failed with
    ``StoreUnavailable``. Alice's study reads a store she named; Bob names the same folder with
    another vocabulary: refused, naming the field, and Alice's store is left byte for byte."""
    from cbscore.data import DataConfig, prepare

    home = tmp_path / "home"
    shared = home / "data" / "team-store"  # inside the lab's store folder ($CBS_HOME/data): allowed
    monkeypatch.setenv("CBS_STORE_DIR", str(home / "data"))  # the web app's store folder, here and there
    prepare(DataConfig(vocab_size=512, max_documents=120, val_fraction=0.1, store_dir=str(shared)))
    before = _files(shared)
    assert {"manifest.json", "train.bin", "val.bin"} <= set(before)
    with web_with_sign_in(tmp_path, provider, {"CBS_STORE_ROOTS": ""}) as (web, log), \
            chromium(tmp_path / "profile") as driver:
        sign_in(driver, web, ALICE)
        _wait(driver, lambda d: "Launch a study" in text(d), 60, "the Launch page")
        print(wait_warm(log))
        _load_yaml(driver, TINY.format(name="alices", vocab=512, store=f", store_dir: {shared}"))
        _wait(driver, lambda d: _input(d, "Study name").get_attribute("value") == "alices", 30, "the form filled")
        _launched(driver, "alices")  # the same settings share the store

        sign_in(driver, web, BOB)
        _wait(driver, lambda d: "Launch a study" in text(d), 60, "the Launch page")
        _load_yaml(driver, TINY.format(name="bobs", vocab=300, store=f", store_dir: {shared}"))
        _wait(driver, lambda d: _input(d, "Study name").get_attribute("value") == "bobs", 30, "the form filled")
        message, took = _launch_refused(driver, "holds a token store prepared with other settings")
        assert "(data.store_dir)" in message and str(shared)[:40] in message, message
        print(f"refusal shown after {took:.2f} s")
        assert took < SHOWN_WITHIN_S
    assert _files(shared) == before  # not rebuilt, not touched


def _cpu_s(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: CPU seconds the web process may spend on a refused upload of a million rows (it spent 112 s
#: parsing one), and MiB its memory may grow by (it grew by 1.2 GB); the 8 MB upload itself is held.
IMPORT_CPU_S = 5.0
IMPORT_GROWTH_MIB = 150.0


def test_a_steps_csv_of_a_million_rows_is_refused_before_it_is_parsed(tmp_path, provider):
    """Finding 9: importing a 1M-row CSV cost the web process 112 s of CPU and 1.2 GB."""
    from selenium.webdriver.common.by import By

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)")
    big = tmp_path / "million.csv"
    big.write_text("setting,batch_size,steps\n" + "s,4,100\n" * 1_000_000)
    with web_signing_in(tmp_path, provider, {}) as (port, _, pid), chromium(tmp_path / "profile") as driver:
        web = f"http://127.0.0.1:{port}"
        sign_in(driver, web, ALICE)
        print(wait_warm(tmp_path / "web.log"))  # its CPU is not counted below
        driver.get(f"{web}/import_table")
        _wait(driver, lambda d: "Import a steps table" in text(d) and d.find_elements(
            By.CSS_SELECTOR, "input[type='file']"), 60, "the Import page")
        cpu, rss = _cpu_s(pid), _rss_mib(pid)
        upload = driver.find_element(By.CSS_SELECTOR, "input[type='file']")
        message, took = _error_after(driver, lambda: upload.send_keys(str(big)), "MAX_IMPORT_ROWS")
        cpu, rss = _cpu_s(pid) - cpu, _rss_mib(pid) - rss
        assert "million.csv: 1,000,000 rows, over the limit of 50,000" in message, message
        print(f"refusal shown {took:.2f} s after the file was chosen (upload included); the web process spent "
              f"{cpu:.2f} s of CPU and grew by {rss:.0f} MiB")
        assert took < SHOWN_WITHIN_S
        assert cpu < IMPORT_CPU_S and rss < IMPORT_GROWTH_MIB

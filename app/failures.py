"""What a page shows when something fails: a message that says what to do, never a traceback.

Pages run their body inside :func:`shown_as_message`; a failure becomes ``st.error`` (or
``st.info`` for "nothing here yet") with the next step, and the traceback goes to the server log.
Streamlit's own control flow (``st.rerun``, ``st.stop``, ``st.switch_page``) derives from
``BaseException`` and passes through untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from cbscore.errors import CbsError, ConfigError, clipped, masked, shown

log = logging.getLogger("cbslab.app")


class Nothing(Exception):
    """There is nothing to show yet; the message says how to get something (shown as info)."""


class Unavailable(Exception):
    """A service the page needs does not answer; the message says how to start it."""


def explain(exc: BaseException) -> str:
    """A one-paragraph message for ``exc`` that says what went wrong and what to do, with the
    password of any URL in it masked (:func:`cbscore.errors.masked`)."""
    return masked(_explain(exc))


def _explain(exc: BaseException) -> str:
    if isinstance(exc, (Nothing, Unavailable)):
        return str(exc)
    if isinstance(exc, ConfigError):
        from app.spec_form import label_of

        return f"**{label_of(exc.field)}** (`{exc.field}`): {clipped(exc.reason)}, but got `{shown(exc.value)}`."
    if isinstance(exc, CbsError):
        return str(exc)
    if isinstance(exc, ModuleNotFoundError):
        return (f"A part of CBS Lab is missing from this install (`{exc.name}`). "
                "Reinstall it with `make install`.")
    return (f"Something went wrong: {type(exc).__name__}: {exc}. "
            "The app's server log has the details; reload the page to try again.")


def show(exc: BaseException) -> None:
    """Show ``exc`` as a message: info for :class:`Nothing`, an error otherwise."""
    if isinstance(exc, Nothing):
        st.info(explain(exc), icon=":material/info:")
    elif isinstance(exc, Unavailable):
        st.warning(explain(exc), icon=":material/cloud_off:")
    else:
        st.error(explain(exc), icon=":material/error:")


@contextmanager
def shown_as_message(what: str = "this page") -> Iterator[None]:
    """Run a block; turn any exception into a message (and the traceback into the log)."""
    try:
        yield
    except (Nothing, Unavailable, CbsError) as exc:
        show(exc)
    except Exception as exc:  # the UI boundary: a page never shows a traceback
        log.exception("error while rendering %s", what)
        show(exc)

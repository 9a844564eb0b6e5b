"""CBS Lab's web app: ``cbs web`` (or ``streamlit run app/streamlit_app.py``).

One navigation over the pages in ``app/app_pages/``; the pages hold UI only, the figures come
from :mod:`app.charts` and the data from :mod:`app.sources` (studies run here) or an uploaded
steps table.
"""

from __future__ import annotations

import streamlit as st

from app import auth, failures, panels

st.set_page_config(page_title="CBS Lab", page_icon=":material/science:", layout="wide",
                   initial_sidebar_state="expanded")
# With sign-in configured ([auth] in .streamlit/secrets.toml), nothing below runs for a visitor who
# has not signed in: no page, no sidebar, no read of the studies (app/auth.py).
user = auth.require_user()

pages = {
    "Run": [
        st.Page("app_pages/launch.py", title="Launch", icon=":material/rocket_launch:", default=True),
        st.Page("app_pages/studies.py", title="Studies", icon=":material/monitoring:"),
    ],
    "Results": [
        st.Page("app_pages/curves.py", title="Curves", icon=":material/show_chart:"),
        st.Page("app_pages/scaling.py", title="Scaling laws", icon=":material/trending_up:"),
        st.Page("app_pages/local_cbs.py", title="Local CBS", icon=":material/timeline:"),
    ],
    "Data": [
        st.Page("app_pages/import_table.py", title="Import", icon=":material/upload_file:"),
    ],
    "Science": [
        st.Page("app_pages/theory.py", title="Theory", icon=":material/functions:"),
    ],
}
page = st.navigation(pages)
with failures.shown_as_message("the sidebar"):
    auth.sidebar(user)
    panels.sidebar()
with failures.shown_as_message(f"the {page.title} page"):
    page.run()

"""Steps-to-target, the S(B) fit, the critical batch size and its scaling laws.

Pure numpy/scipy (never torch): the same code runs in the trainer, the study runner, the
Streamlit app and the ``cbs fit`` CLI, on any steps table. Definitions: DESIGN.md §1.
"""

from cbscore.analysis._crossing import first_crossing

__all__ = ["first_crossing"]

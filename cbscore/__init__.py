"""cbscore — the CBS Lab library: data, model, trainer, steps-to-target, CBS and scaling fits.

Imports torch, numpy, scipy and datasets only; never streamlit, celery or mlflow.
"""

__version__ = "0.1.0"

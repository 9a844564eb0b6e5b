"""The model: :mod:`cbscore.model.gpt` (the paper's decoder-only transformer, torch) and
:mod:`cbscore.model.config` (its shapes and named presets, torch-free, so study planning, the CLI and
the web app can name, count and cost models without importing torch)."""

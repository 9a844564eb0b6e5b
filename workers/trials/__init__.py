"""What runs trials: the worker process's Celery app, its one task, the trial's execution from lease
to outcome, and its devices. A trial that ends hands its study to :mod:`workers.studies` (the
runner's next pass), so this package sits above it."""

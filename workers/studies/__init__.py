"""What runs studies: the runner (one idempotent pass of the planner over a study), the ledger of
leases it and the trials share, the records it builds from MLflow and the ledger, the Optuna search,
the forecast, retry, reuse, extension checks, local-CBS studies and deletion. Imports
:mod:`workers.infra` and :mod:`workers.tracking`, never the trial side."""

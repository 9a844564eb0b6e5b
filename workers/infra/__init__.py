"""What every worker process shares: its settings, the Celery app and its broker's queues, the
worker pool and late-ack handling, atomic file writes, the schema lock, where a trial's checkpoint
lives and its time limit. Imports nothing else of ``workers``."""

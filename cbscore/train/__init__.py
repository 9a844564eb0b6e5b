"""The trainer: one trial's loop and what it owns.

``trainer`` runs the loop (``run_trial``); ``config`` is its ``TrainConfig``; ``checkpointer`` saves
and resumes a trial (``checkpoint`` holds the file format); ``callbacks`` are the loop's hooks;
``result`` and ``progress`` say how a trial ended and where it is; ``step`` and
``micro_batch`` take one optimizer step; ``heldout`` and ``eval_schedule`` evaluate; ``schedules``
and ``averaging`` shape the learning rate and the weights; ``batch_plan`` and ``branch`` are the
local-CBS batch schedule and branches (``branch_config`` is their part of the config,
``plan_checks`` its rules against the rest of it); ``distributed``, ``gns``, ``device``,
``throughput`` and ``allocator`` are the hardware side.

Callers import the submodule they need, so that reading a ``TrainConfig`` does not import the loop.
"""

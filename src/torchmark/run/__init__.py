"""The one run path every kind of run goes through: config, plan, runner, case, session,
watchdog, resume, environment.

Nothing is imported here: ``torchmark show`` reads ``run.resume.can_resume`` and must not
load torch (~2 s) through this package.
"""

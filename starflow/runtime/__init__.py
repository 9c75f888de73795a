"""Many runs: the runner (driving, waking), workers, job workers, the
maintenance loops, cron schedules and forks.
"""

"""Supervision: a job's workers started (launchers), watched, timed out and read back
(supervisor), and the containers of a supervisor that died removed (reaper)."""

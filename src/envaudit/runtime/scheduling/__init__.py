"""Scheduling: the steps of one job (steps.py), and many jobs over many devices (audit.py),
locally or as a Slurm array (slurm.py), each GPU held by one job at a time (gpu_lock.py)."""

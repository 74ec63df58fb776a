"""Run the harness for one (solution, device) job, in the runtime that makes its environment.

Read top to bottom, the way of a job:
    jobs.py         RunRequest -> Job: the request checked whole, every path resolved
    base.py         Runtime: what every runtime does (ensure an env, prepare a launcher)
    runtimes/       host, local, docker/podman: the Runtime implementations
    registry.py     runtime name -> class
    supervision/    the supervisor, the launchers that start workers, the container reaper
    scheduling/     steps.py (plan, prepare, stage, supervise), audit.py (many jobs on many
                    devices), slurm.py (the same as a Slurm array), gpu_lock.py
Beside them: devices.py (GPUs by UUID), jit.py (compile caches), staging.py (the harness's
files as every environment sees them), timeline.py (an audit's timeline, on request).
"""

"""The runtimes: host (this interpreter), local (a uv venv from the lock), docker and podman
(the env's image). Each is a `envaudit.runtime.base.Runtime`; the registry names them."""

"""The shared validation and timing harness.

Runs inside every solution environment, so it imports only the standard library, torch and
safetensors (NVML when present) and reads the dataset's JSON itself rather than through the
pydantic models of `envaudit.schema.models`. Its files are declared once, in
`envaudit.schema.harness.HARNESS_FILES`.
"""

HARNESS_VERSION = "0.2.0"

"""Load a TraceSet root, resolve its blobs and check every input (`check-inputs`)."""

"""Locks: resolve env.toml into lock.json, fetch artifacts into a content-addressed store, build
sources into hashed wheels, and compare an installed environment with its lock."""

"""Tracing, passes, code generation and caches: framework-free."""

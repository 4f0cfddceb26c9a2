"""The built-in sandbox backends: bwrap (default), gvisor and process."""

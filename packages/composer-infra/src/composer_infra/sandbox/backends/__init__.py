"""The built-in sandbox backends: bwrap (default, with an exec channel), bwrap-per-command,
gvisor and process."""

"""The built-in behaviour monitors: metrics and flags, never reward."""

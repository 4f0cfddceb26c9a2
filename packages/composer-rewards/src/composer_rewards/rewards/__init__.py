"""The built-in reward plugins."""

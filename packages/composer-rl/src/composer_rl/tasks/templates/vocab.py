"""Names the templates draw from. Short, common words keep the tiny model's job to copying."""

MODULES = ["mathops", "scores", "billing", "geometry", "stats", "ledger", "metrics", "pricing"]
FUNCTIONS = ["combine", "blend", "mix", "fold", "merge", "total", "scale", "compute"]
HELPERS = ["line_cost", "item_cost", "unit_cost", "row_cost"]
PARAMS = ["value", "amount", "count", "size"]
CONSTANTS = ["LIMIT", "RATE", "FACTOR", "WIDTH", "MAX_ITEMS", "TIMEOUT"]

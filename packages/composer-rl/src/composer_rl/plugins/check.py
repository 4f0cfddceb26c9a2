"""Check a plugin spec in this interpreter: ``python -m composer_rl.plugins.check SPEC``.

``composer-rl plugins add`` runs this with the running job's interpreter and import path,
so "can the job load this plugin" is answered by the environment that will load it, not
by the environment the command happens to run in. Prints one JSON object.
"""

from __future__ import annotations

import json
import sys

from composer_rewards import PluginSpecError
from composer_rl.plugins.manager import validate_spec


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m composer_rl.plugins.check package.module:Plugin", file=sys.stderr)
        return 2
    try:
        hooks = validate_spec(argv[0])
    except PluginSpecError as error:
        print(json.dumps({"ok": False, "error": str(error)}))
        return 1
    print(json.dumps({"ok": True, "hooks": hooks}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

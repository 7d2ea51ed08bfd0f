"""``python -m constrain.jsonschema [--write FILE]``: print the support tables, or regenerate
them inside FILE (between the support-table markers)."""

import sys

from constrain.jsonschema.keywords import support_table, write_into

if len(sys.argv) > 2 and sys.argv[1] == "--write":
    write_into(sys.argv[2])
else:
    print(support_table())
